package webhook_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
	"github.com/presenced/presenced/webhook"
)

// silentClient is a connection as a Node sees it, with nowhere to send.
type silentClient struct{ uid string }

func (*silentClient) Send(protocol.Encoded) {}
func (*silentClient) Probe()                {}
func (*silentClient) Close(int, string)     {}

// A Node's edges reach the backend in order, each once, in as few POSTs as
// the batch size allows: 10,000 edges made within one tick (2,500 users
// connect, join, leave and go) arrive in ten batches of 1,000.
func TestTenThousandEdgesInATickArriveInTenBatches(t *testing.T) {
	rc := newReceiver(t, nil)
	s := start(t, webhook.Config{URL: rc.URL})
	n, err := presence.New(presence.Config{OnEdges: s.AddEdges})
	require.NoError(t, err)
	ctx := context.Background()
	began := time.Now()
	var want []string
	for i := range 2500 {
		uid := fmt.Sprintf("u%04d", i)
		c := &silentClient{uid}
		require.NoError(t, n.Connect(ctx, c, uid, []string{"lobby"}))
		n.Disconnect(c)
		want = append(want, "online "+uid+" ", "join "+uid+" lobby", "leave "+uid+" lobby", "offline "+uid+" ")
	}
	n.Step() // one tick's edges, handed over at once
	require.Eventually(t, func() bool { return len(rc.delivered(t, true)) >= len(want) }, testWait, testPoll)
	took := time.Since(began)
	n.Close()
	var got []string
	for _, e := range rc.delivered(t, true) {
		got = append(got, e.Type+" "+e.UID+" "+e.Channel)
	}
	require.Equal(t, want, got, "in order, each once")
	assert.Equal(t, 10, rc.count(), "POSTs")
	t.Logf("10,000 edges in %d POSTs, delivered %v after the first edge", rc.count(), took)
}

// A set that changed a user's record reaches the backend as an update
// event with the whole new record at the top level; an emptied record
// carries none of its parts.
func TestSetsArriveAsUpdateEvents(t *testing.T) {
	rc := newReceiver(t, nil)
	s := start(t, webhook.Config{URL: rc.URL})
	n, err := presence.New(presence.Config{OnEdges: s.AddEdges})
	require.NoError(t, err)
	c := &silentClient{"bob"}
	require.NoError(t, n.Connect(context.Background(), c, "bob", nil))
	require.NoError(t, n.Set(c, protocol.Set{Mode: protocol.ModeDND, NoteSet: true, Note: &protocol.Note{Text: "out", Emoji: "🌴"}}))
	require.NoError(t, n.Set(c, protocol.Set{Mode: protocol.ModeOnline, NoteSet: true}))
	n.Step()
	require.Eventually(t, func() bool { return len(rc.delivered(t, true)) >= 3 }, testWait, testPoll)
	n.Close()
	var got []string
	for _, r := range rc.requests() {
		got = append(got, string(r.body))
	}
	all := strings.Join(got, "")
	assert.Contains(t, all, `"type":"update","uid":"bob","mode":"dnd","note":{"text":"out","emoji":"🌴"},"at":`)
	assert.Contains(t, all, `"type":"update","uid":"bob","at":`)
	evs := rc.delivered(t, true)
	require.Len(t, evs, 3)
	assert.Equal(t, []string{"online", "update", "update"}, []string{evs[0].Type, evs[1].Type, evs[2].Type})
}
