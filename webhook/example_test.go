package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/presenced/presenced/webhook"
)

// A Sender POSTs the edges it is given, one batch per Add (or per
// MaxBatch), to the backend's URL, naming the batch and each event.
func ExampleSender() {
	got := make(chan string, 1)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		// The ids carry the Sender's random prefix: shown here as <prefix>.
		prefix := regexp.MustCompile(`(msg|evt)_[a-z2-7]{26}_`)
		got <- r.Header.Get("Content-Type") + "\n" +
			"webhook-id: " + prefix.ReplaceAllString(r.Header.Get("webhook-id"), "${1}_<prefix>_") + "\n" +
			prefix.ReplaceAllString(string(body), "${1}_<prefix>_")
	}))
	defer backend.Close()

	s, err := webhook.New(webhook.Config{URL: backend.URL})
	if err != nil {
		panic(err)
	}
	// What one tick of the presence node produced.
	s.Add(webhook.Event{Type: "online", UID: "bob", At: 1764000000000},
		webhook.Event{Type: "join", Channel: "lobby", UID: "bob", At: 1764000000000})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	fmt.Println(<-got)
	cancel()
	fmt.Println(<-done)
	// Output:
	// application/json
	// webhook-id: msg_<prefix>_1
	// {"events":[{"id":"evt_<prefix>_1_0","type":"online","uid":"bob","at":1764000000000},{"id":"evt_<prefix>_1_1","type":"join","channel":"lobby","uid":"bob","at":1764000000000}]}
	// context canceled
}

// verify checks a POST the Standard Webhooks way with the standard library
// alone: the signature over id.timestamp.body, and a timestamp within 5
// minutes of now, so that a captured POST replayed later is refused. It
// returns the webhook-id, by which the backend drops repeats.
func verify(key []byte, h http.Header, body []byte, now time.Time) (string, error) {
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if id == "" || err != nil {
		return "", errors.New("no webhook-id or webhook-timestamp")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return "", errors.New("timestamp out of tolerance")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := []byte("v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	for _, sig := range strings.Fields(h.Get("webhook-signature")) {
		if hmac.Equal([]byte(sig), want) {
			return id, nil
		}
	}
	return "", errors.New("no valid signature")
}

// A backend checks each POST against the secret it shares with the server,
// and refuses one replayed past the tolerance.
func Example_verify() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		panic(err)
	}
	type post struct {
		header http.Header
		body   []byte
	}
	got := make(chan post, 1)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- post{r.Header.Clone(), body}
	}))
	defer backend.Close()

	s, err := webhook.New(webhook.Config{URL: backend.URL, Secret: secret})
	if err != nil {
		panic(err)
	}
	s.Add(webhook.Event{Type: "online", UID: "bob", At: 1764000000000})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Run(ctx) }()
	p := <-got

	_, err = verify(key, p.header, p.body, time.Now())
	fmt.Println("on arrival:", err)
	_, err = verify(key, p.header, p.body, time.Now().Add(6*time.Minute))
	fmt.Println("replayed 6 minutes later:", err)
	_, err = verify(key, p.header, append(p.body, ' '), time.Now())
	fmt.Println("body changed:", err)
	// Output:
	// on arrival: <nil>
	// replayed 6 minutes later: timestamp out of tolerance
	// body changed: no valid signature
}
