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
