package transport_test

import (
	"context"
	"encoding/json"
	"errors"
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
// routes and mounts the Hub for /ws, /api/, /healthz and /readyz.
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
	mux.Handle("/readyz", hub)
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
	// {"type":"welcome","uid":"alice","timeout_ms":30000,"protocol":"2.2"}
	// {"type":"joined","channel":"lobby","count":1,"members":["alice"]}
	// {"type":"chat","channel":"lobby","from":"alice","text":"hello"}
	// {"uid":"alice","online":true,"connections":1,"state":"active"}
	// websocket: close 1001 (going away): server shutdown
	// <nil>
}

// serve runs hub on a loopback test server and returns a client for uid,
// joined to channels, with its welcome and snapshots already read.
func serve(hub *transport.Hub, uid string, channels ...string) (*websocket.Conn, func()) {
	srv := httptest.NewServer(hub)
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws?uid=" + uid
	if len(channels) > 0 {
		url += "&channels=" + strings.Join(channels, ",")
	}
	ws, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		panic(err)
	}
	for range 1 + len(channels) {
		ws.ReadMessage()
	}
	return ws, func() {
		ws.Close()
		hub.Shutdown(context.Background())
		srv.Close()
	}
}

// The server side publishes to a channel: every connection that joined it,
// on every node, gets a publish frame.
func ExampleHub_Publish() {
	hub, _ := transport.New(transport.Config{})
	ws, stop := serve(hub, "alice", "lobby")
	defer stop()

	hub.Publish(context.Background(), "lobby", json.RawMessage(`{"title":"standup in 5"}`))
	_, frame, _ := ws.ReadMessage()
	fmt.Println(string(frame))
	// Output: {"type":"publish","channel":"lobby","data":{"title":"standup in 5"}}
}

// The server side sends to one user: each of its connections, on every
// node, gets a message frame.
func ExampleHub_Send() {
	hub, _ := transport.New(transport.Config{})
	ws, stop := serve(hub, "bob")
	defer stop()

	hub.Send(context.Background(), "bob", json.RawMessage(`{"unread":3}`))
	_, frame, _ := ws.ReadMessage()
	fmt.Println(string(frame))
	// Output: {"type":"message","data":{"unread":3}}
}

// Disconnect ends a user's sessions, e.g. after a ban or a password change.
func ExampleHub_Disconnect() {
	hub, _ := transport.New(transport.Config{})
	ws, stop := serve(hub, "mallory")
	defer stop()

	hub.Disconnect(context.Background(), "mallory")
	_, _, err := ws.ReadMessage()
	fmt.Println(err)
	// Output: websocket: close 4403: disconnected
}

// Online and Members answer from the Engine, across nodes with a cluster
// engine.
func ExampleHub_Members() {
	hub, _ := transport.New(transport.Config{})
	_, stop := serve(hub, "carol", "lobby")
	defer stop()

	ctx := context.Background()
	conns, _ := hub.Online(ctx, "carol")
	count, members, _ := hub.Members(ctx, "lobby", 10)
	fmt.Println(conns, count, members)
	// Output: 1 1 [carol]
}

// OnMessage takes the application's own frame types, here a reaction
// relayed to the channel; Authorize keeps a channel to its team.
func ExampleConfig_hooks() {
	var hub *transport.Hub
	hub, _ = transport.New(transport.Config{
		Authorize: func(uid, channel string) bool {
			return !strings.HasPrefix(channel, "staff:") || strings.HasSuffix(uid, "@staff")
		},
		OnMessage: func(ctx context.Context, uid, typ string, frame json.RawMessage) error {
			if typ != "reaction" {
				return fmt.Errorf("unknown type %q", typ)
			}
			var in struct{ Channel string }
			if json.Unmarshal(frame, &in) != nil || in.Channel == "" {
				return errors.New(`reaction needs a "channel"`)
			}
			data, _ := json.Marshal(map[string]string{"reaction": uid})
			return hub.Publish(ctx, in.Channel, data)
		},
	})
	ws, stop := serve(hub, "dave", "lobby")
	defer stop()

	ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"reaction","channel":"lobby"}`))
	_, frame, _ := ws.ReadMessage()
	fmt.Println(string(frame))
	ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"join","channel":"staff:ops"}`))
	_, frame, _ = ws.ReadMessage()
	fmt.Println(string(frame))
	// Output:
	// {"type":"publish","channel":"lobby","data":{"reaction":"dave"}}
	// {"type":"error","error":"not allowed to join this channel","channel":"staff:ops"}
}

// OnPresence tells the application of each user's online and offline
// edges, once across all nodes: here to record when users were last seen.
func ExampleConfig_onPresence() {
	seen := make(chan string, 2)
	hub, _ := transport.New(transport.Config{
		OnPresence: func(uid string, online bool) {
			seen <- fmt.Sprintf("%s online=%v", uid, online)
		},
	})
	_, stop := serve(hub, "erin")
	fmt.Println(<-seen)
	stop()
	fmt.Println(<-seen)
	// Output:
	// erin online=true
	// erin online=false
}
