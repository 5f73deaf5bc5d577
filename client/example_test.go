package client_test

import (
	"cmp"
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

// ExampleClient_Set: alice sets do-not-disturb with a note, then clears
// both; bob, in the same channel, hears of each change in a diff and reads
// her record.
func ExampleClient_Set() {
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
	bob, err := client.Dial(ctx, url, client.Options{UID: "bob", Channels: []string{"lobby"}})
	if err != nil {
		panic(err)
	}
	defer bob.Close()

	meeting := &client.Note{Text: "In a meeting", Emoji: "📅", Until: time.Now().Add(time.Hour).UnixMilli()}
	if err := alice.Set(ctx, client.Record{Mode: protocol.ModeDND, Note: meeting}); err != nil {
		panic(err)
	}
	for ev := range bob.Events() {
		p, ok := ev.(*protocol.Presence)
		if !ok {
			continue
		}
		if _, changed := p.Updated["alice"]; !changed {
			continue
		}
		r, _ := bob.Record("alice")
		if r.Note == nil {
			fmt.Println("alice:", cmp.Or(r.Mode, "online"), "without a note")
			break
		}
		fmt.Println("alice:", r.Mode, r.Note.Emoji, r.Note.Text)
		// Both parts given: online, and a zero Note clears the note. A
		// part left out would be kept.
		if err := alice.Set(ctx, client.Record{Mode: protocol.ModeOnline, Note: &client.Note{}}); err != nil {
			panic(err)
		}
	}
	// Output:
	// alice: dnd 📅 In a meeting
	// alice: online without a note
}
