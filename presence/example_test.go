package presence_test

import (
	"context"
	"fmt"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
)

// printer is a Client that prints what the Node sends it.
type printer struct{ name string }

func (p *printer) Send(f protocol.Encoded) { fmt.Printf("%s <- %s\n", p.name, f.Data) }
func (p *printer) Probe()                  {}
func (p *printer) Close(code int, reason string) {
	fmt.Printf("%s closed: %d %s\n", p.name, code, reason)
}

// A Node counts connections into users and channel members and tells each
// connection what it asked for: a snapshot when it joins, then one diff per
// tick of its clock.
func ExampleNode() {
	node, err := presence.New(presence.Config{})
	if err != nil {
		panic(err)
	}
	defer node.Close()
	ctx := context.Background()

	alice := &printer{"alice"}
	_ = node.Connect(ctx, alice, "alice", []string{"lobby"})
	_ = node.Connect(ctx, &printer{"bob"}, "bob", []string{"lobby"})
	node.Step() // one tick; a server calls node.Run(ctx) instead
	// Output:
	// alice <- {"type":"joined","channel":"lobby","count":1,"members":["alice"]}
	// bob <- {"type":"joined","channel":"lobby","count":2,"members":["alice","bob"]}
	// alice <- {"type":"presence","channel":"lobby","count":2,"joins":["bob"],"leaves":[]}
}

// A set changes the user's record: its members hear of it in the next
// tick's diff. An invisible user is gone for everyone else, while its own
// connections still count it. (Each tick's frames go out in no set order.)
func ExampleNode_Set() {
	node, err := presence.New(presence.Config{})
	if err != nil {
		panic(err)
	}
	defer node.Close()
	ctx := context.Background()

	alice := &printer{"alice"}
	_ = node.Connect(ctx, alice, "alice", []string{"lobby"})
	_ = node.Connect(ctx, &printer{"bob"}, "bob", []string{"lobby"})
	node.Step()
	_ = node.Set(alice, protocol.Set{Mode: protocol.ModeDND, NoteSet: true, Note: &protocol.Note{Text: "focus", Emoji: "🎧"}})
	node.Step()
	_ = node.Set(alice, protocol.Set{Mode: protocol.ModeInvisible})
	node.Step()
	// Unordered output:
	// alice <- {"type":"joined","channel":"lobby","count":1,"members":["alice"]}
	// bob <- {"type":"joined","channel":"lobby","count":2,"members":["alice","bob"]}
	// alice <- {"type":"presence","channel":"lobby","count":2,"joins":["bob"],"leaves":[]}
	// alice <- {"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"alice":{"mode":"dnd","note":{"text":"focus","emoji":"🎧"}}}}
	// bob <- {"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"alice":{"mode":"dnd","note":{"text":"focus","emoji":"🎧"}}}}
	// alice <- {"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"alice":{"mode":"invisible","note":{"text":"focus","emoji":"🎧"}}}}
	// bob <- {"type":"presence","channel":"lobby","count":1,"joins":[],"leaves":["alice"]}
}

// logged is an Engine that prints each change the Node applies, then hands
// it to the in-memory engine.
type logged struct{ presence.Engine }

func (e logged) Apply(c presence.Change) {
	switch c.Kind {
	case presence.ChangeUser:
		fmt.Printf("user %s: %d connection(s)\n", c.UID, c.N)
	case presence.ChangeMember:
		fmt.Printf("member %s of %s: %d connection(s)\n", c.UID, c.Channel, c.N)
	case presence.ChangeSet:
		fmt.Printf("set %s: mode %q\n", c.UID, c.Set.Mode)
	}
	e.Engine.Apply(c)
}

// An Engine hears every change a Node makes through Apply, one at a time,
// in the order they were made: a user's record changes and its counts in
// one stream, so a user who turns invisible and then joins is invisible
// by the time its join arrives.
func ExampleEngine() {
	node, err := presence.New(presence.Config{Engine: logged{presence.NewMemoryEngine()}})
	if err != nil {
		panic(err)
	}
	defer node.Close()
	ctx := context.Background()

	alice := &quiet{}
	_ = node.Connect(ctx, alice, "alice", nil)
	_ = node.Set(alice, protocol.Set{Mode: protocol.ModeInvisible})
	_ = node.Join(ctx, alice, "lobby")
	node.Disconnect(alice)
	// Output:
	// user alice: 1 connection(s)
	// set alice: mode "invisible"
	// member alice of lobby: 1 connection(s)
	// member alice of lobby: 0 connection(s)
	// user alice: 0 connection(s)
}

// quiet is a Client that drops what the Node sends it.
type quiet struct{}

func (quiet) Send(protocol.Encoded) {}
func (quiet) Probe()                {}
func (quiet) Close(int, string)     {}
