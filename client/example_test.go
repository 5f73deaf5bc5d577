package client_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/presenced/presenced/client"
	"github.com/presenced/presenced/protocol"
	"github.com/presenced/presenced/transport"
)

// Example starts a server, connects alice to its lobby, and follows the
// lobby from alice's events as bob comes in and chats.
func Example() {
	hub, err := transport.New(transport.Config{Slots: 501, Tick: 20 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(hub)
	defer srv.Close()
	defer hub.Shutdown(context.Background())
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws"

	ctx := context.Background()
	alice, err := client.Dial(ctx, url, client.Options{UID: "alice", Channels: []string{"lobby"}})
	if err != nil {
		panic(err)
	}
	defer alice.Close()
	fmt.Println("lobby:", alice.Channel("lobby").Members)

	bob, err := client.Dial(ctx, url, client.Options{UID: "bob", Channels: []string{"lobby"}})
	if err != nil {
		panic(err)
	}
	defer bob.Close()
	for ev := range alice.Events() {
		switch f := ev.(type) {
		case *protocol.Presence:
			fmt.Println("joins:", f.Joins, "lobby:", alice.Channel("lobby").Members)
			if err := bob.Chat(ctx, "lobby", "hi alice"); err != nil {
				panic(err)
			}
		case *protocol.Chat:
			fmt.Printf("%s: %s\n", f.From, f.Text)
			return
		}
	}
	// Output:
	// lobby: [alice]
	// joins: [bob] lobby: [alice bob]
	// bob: hi alice
}
