package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// event is one webhook event as the receiver logged it.
type event struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Channel string `json:"channel"`
	UID     string `json:"uid"`
	At      int64  `json:"at"` // Unix milliseconds, Redis's clock
}

// post is one POST the receiver got, whatever it answered.
type post struct {
	got    time.Time
	id     string // webhook-id
	status int
	body   string
	events []event
	err    string // why it was refused, for a bad signature or body
}

// receiver is the backend: it verifies each POST the Standard Webhooks way,
// answers 503 to a share of them (the node must retry the same batch), and
// logs every POST.
type receiver struct {
	key      []byte
	failRate float64
	srv      *http.Server
	url      string

	mu    sync.Mutex
	rnd   *rand.Rand
	posts []post
}

// newReceiver serves on a free loopback port; secret is whsec_<base64>.
func newReceiver(secret string, failRate float64, seed uint64) (*receiver, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return nil, fmt.Errorf("webhook secret: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("webhook receiver: %w", err)
	}
	rc := &receiver{key: key, failRate: failRate, rnd: rand.New(rand.NewPCG(seed, 3)), url: "http://" + ln.Addr().String() + "/hook"}
	rc.srv = &http.Server{Handler: rc, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = rc.srv.Serve(ln) }()
	return rc, nil
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := post{got: time.Now(), id: r.Header.Get("webhook-id")}
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	p.body = string(body)
	switch {
	case r.Method != http.MethodPost || r.URL.Path != "/hook":
		p.status, p.err = http.StatusNotFound, r.Method+" "+r.URL.Path
	case err != nil:
		p.status, p.err = http.StatusBadRequest, err.Error()
	default:
		if err := rc.verify(r.Header, body, p.got); err != nil {
			p.status, p.err = http.StatusUnauthorized, err.Error()
			break
		}
		var b struct{ Events []event }
		if err := json.Unmarshal(body, &b); err != nil {
			p.status, p.err = http.StatusBadRequest, err.Error()
			break
		}
		p.events = b.Events
		p.status = http.StatusNoContent
		rc.mu.Lock()
		if rc.rnd.Float64() < rc.failRate {
			p.status = http.StatusServiceUnavailable
		}
		rc.mu.Unlock()
	}
	rc.mu.Lock()
	rc.posts = append(rc.posts, p)
	rc.mu.Unlock()
	w.WriteHeader(p.status)
}

// verify checks the webhook-signature over id.timestamp.body and that the
// timestamp is recent.
func (rc *receiver) verify(h http.Header, body []byte, now time.Time) error {
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	if id == "" || ts == "" {
		return errors.New("webhook-id or webhook-timestamp missing")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp: %w", err)
	}
	if skew := now.Sub(time.Unix(sec, 0)).Abs(); skew > 5*time.Minute {
		return fmt.Errorf("webhook-timestamp %v off", skew)
	}
	mac := hmac.New(sha256.New, rc.key)
	fmt.Fprintf(mac, "%s.%s.", id, ts)
	mac.Write(body)
	sum := mac.Sum(nil)
	for sig := range strings.FieldsSeq(h.Get("webhook-signature")) {
		v, ok := strings.CutPrefix(sig, "v1,")
		if !ok {
			continue
		}
		if got, err := base64.StdEncoding.DecodeString(v); err == nil && hmac.Equal(got, sum) {
			return nil
		}
	}
	return errors.New("no valid v1 signature")
}

// log copies the posts so far.
func (rc *receiver) log() []post {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]post(nil), rc.posts...)
}

// lastPost is when the last POST came, or zero.
func (rc *receiver) lastPost() time.Time {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.posts) == 0 {
		return time.Time{}
	}
	return rc.posts[len(rc.posts)-1].got
}

func (rc *receiver) close() error { return rc.srv.Close() }
