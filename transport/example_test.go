package transport_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/presenced/presenced/transport"
)

// Example embeds a Hub in an existing server: the application keeps its own
// routes and mounts the Hub for /ws, /api/ and /healthz.
func Example() {
	hub, err := transport.New(transport.Config{
		// Auth: transport.JWTAuth(secret) in production; nil trusts ?uid=.
		Slots: 31, Tick: time.Second, // a 30 s timeout
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app route\n") })
	mux.Handle("/ws", hub)
	mux.Handle("/api/", hub)
	mux.Handle("/healthz", hub)
	srv := httptest.NewServer(mux) // in a real server: http.Server{Handler: mux, ...}
	defer srv.Close()

	// A client joins the lobby as it connects, then chats there.
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/ws?uid=alice&channels=lobby", nil)
	if err != nil {
		panic(err)
	}
	defer ws.Close()
	_, welcome, _ := ws.ReadMessage()
	fmt.Println(string(welcome))
	_, joined, _ := ws.ReadMessage()
	fmt.Println(string(joined))
	ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"chat","channel":"lobby","text":"hello"}`))
	_, chat, _ := ws.ReadMessage()
	fmt.Println(string(chat))

	resp, _ := http.Get(srv.URL + "/api/presence/alice")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Print(string(body))

	// On SIGTERM: clients get close 1001, then stop the http.Server.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- hub.Shutdown(ctx) }()
	_, _, err = ws.ReadMessage() // the client answers the close frame
	fmt.Println(err)
	fmt.Println(<-done)
	// Output:
	// {"type":"welcome","uid":"alice","timeout_ms":30000}
	// {"type":"joined","channel":"lobby","count":1,"members":["alice"]}
	// {"type":"chat","channel":"lobby","from":"alice","text":"hello"}
	// {"uid":"alice","online":true,"connections":1}
	// websocket: close 1001 (going away): server shutdown
	// <nil>
}
