package presence

import (
	"context"
	"strconv"
	"testing"

	"github.com/presenced/presenced/protocol"
)

// discardClient drops every frame, as a benchmark's clients do. It is not
// empty, so that each one is a pointer of its own.
type discardClient struct{ _ byte }

func (*discardClient) Close(int, string)     {}
func (*discardClient) Probe()                {}
func (*discardClient) Send(protocol.Encoded) {}

// BenchmarkChurn is a user arriving in a room of 50 watched members, joining
// a second channel, and going: the node's whole path for a change, from the
// counts through the in-memory engine's events to the view, with a tick
// every 50 users to net and send the diffs.
func BenchmarkChurn(b *testing.B) {
	n, err := New(Config{Slots: 3})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	ctx := context.Background()
	for i := range 50 {
		if err := n.Connect(ctx, &discardClient{}, "member"+strconv.Itoa(i), []string{"room"}); err != nil {
			b.Fatal(err)
		}
	}
	uids := make([]string, 50)
	for i := range uids {
		uids[i] = "churn" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c := &discardClient{}
		if err := n.Connect(ctx, c, uids[i%len(uids)], []string{"room"}); err != nil {
			b.Fatal(err)
		}
		if err := n.Join(ctx, c, "side"); err != nil {
			b.Fatal(err)
		}
		n.Disconnect(c)
		if i%50 == 49 {
			n.Step()
		}
	}
}
