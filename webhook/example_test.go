package webhook_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/presenced/presenced/webhook"
)

// A Sender POSTs the edges it is given, one batch per Add (or per
// MaxBatch), to the backend's URL.
func ExampleSender() {
	got := make(chan string, 1)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- r.Header.Get("Content-Type") + " " + string(body)
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
	// application/json {"events":[{"type":"online","uid":"bob","at":1764000000000},{"type":"join","channel":"lobby","uid":"bob","at":1764000000000}]}
	// context canceled
}
