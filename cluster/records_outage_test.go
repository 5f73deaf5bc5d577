package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
)

// recordIn returns uid's record as Redis has it, through e.
func recordIn(ct *assert.CollectT, e *Engine, uid string) protocol.Record {
	recs, err := e.Records(context.Background(), []string{uid})
	assert.NoError(ct, err)
	return recs[uid]
}

// Redis restarted empty loses the records with everything else: the nodes
// that hold a user put back the record they know, quietly (no edge), and
// the channels' copies with the memberships, so a node that follows the
// channel afterwards still does not show an invisible member.
func TestRecordsPutBackAfterRedisRestartedEmpty(t *testing.T) {
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	a.follow(t, "alice", "#room") // as a Node does for its own user
	a.SetUser("alice", 1, 0)
	a.SetMember("room", "alice", 1, false)
	a.SetInfo("alice", []byte(`{"name":"Alice"}`))
	a.SetRecord("alice", protocol.Set{Mode: protocol.ModeInvisible})
	want := protocol.Record{Info: []byte(`{"name":"Alice"}`), Mode: protocol.ModeInvisible}
	eventually(t, "alice's record in redis and on a", func(ct *assert.CollectT) {
		assert.Equal(ct, want, recordIn(ct, b.Engine, "alice"))
		a.rec.mu.Lock()
		assert.Equal(ct, want, a.rec.records["alice"])
		a.rec.mu.Unlock()
	})
	k := a.keys[a.shard("room")]
	eventually(t, "the room's copy", func(ct *assert.CollectT) {
		copy, err := srv.client(t).HGet(context.Background(), k.tag+":mr", "room alice").Result()
		assert.NoError(ct, err)
		assert.Contains(ct, copy, `"mode":"invisible"`)
	})
	edges := len(a.rec.madeEdges())

	srv.restart()
	eventually(t, "alice's record put back", func(ct *assert.CollectT) {
		assert.Equal(ct, want, recordIn(ct, b.Engine, "alice"))
		copy, err := srv.client(t).HGet(context.Background(), k.tag+":mr", "room alice").Result()
		assert.NoError(ct, err)
		assert.Contains(ct, copy, `"mode":"invisible"`)
	})
	hidden, err := b.Hidden(context.Background(), "room")
	require.NoError(t, err)
	assert.Equal(t, []string{"alice"}, hidden)

	b.follow(t, "#room")
	b.rec.mu.Lock()
	assert.Equal(t, want, b.rec.records["alice"], "the snapshot's record came first")
	b.rec.mu.Unlock()
	assert.Len(t, a.rec.madeEdges(), edges, "putting back made no edge")
}

// A node that dies leaves its users' records behind: they go offline when
// its records are claimed, and keep mode and note for the last-seen TTL,
// invisible ones with when they turned invisible.
func TestRecordsOutliveACrashedNode(t *testing.T) {
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	a.follow(t, "alice")
	a.SetUser("alice", 1, 0)
	before := time.Now()
	a.SetRecord("alice", protocol.Set{Mode: protocol.ModeInvisible, Note: &protocol.Note{Text: "gone fishing"}, NoteSet: true})
	want := protocol.Record{Mode: protocol.ModeInvisible, Note: &protocol.Note{Text: "gone fishing"}}
	eventually(t, "alice's record", func(ct *assert.CollectT) {
		assert.Equal(ct, want, recordIn(ct, b.Engine, "alice"))
	})
	hidden, err := b.Hidden(context.Background(), "")
	require.NoError(t, err)
	assert.Equal(t, []string{"alice"}, hidden)

	a.crash()
	eventually(t, "alice offline, claimed by b", func(ct *assert.CollectT) {
		st, err := b.Status(context.Background(), "alice")
		assert.NoError(ct, err)
		assert.Equal(ct, 0, st.Conns)
		assert.Equal(ct, want, st.Record)
		assert.WithinRange(ct, st.HiddenAt, before.Add(-time.Second), time.Now())
		assert.False(ct, st.LastSeen.IsZero())
	})
	hidden, err = b.Hidden(context.Background(), "")
	require.NoError(t, err)
	assert.Empty(t, hidden, "invisible and offline is not online")

	// Back on b within the TTL: the record is still hers.
	b.follow(t, "alice")
	b.SetUser("alice", 1, 0)
	eventually(t, "alice online again, invisible", func(ct *assert.CollectT) {
		st, err := b.Status(context.Background(), "alice")
		assert.NoError(ct, err)
		assert.Equal(ct, 1, st.Conns)
		assert.Equal(ct, want, st.Record)
	})
}

// Past the last-seen TTL a record is gone, and a user who comes back
// starts with none.
func TestRecordsEndWithTheLastSeenTTL(t *testing.T) {
	srv := startRedis(t)
	cfg := testConfig(srv.client(t), "a")
	cfg.LastSeenTTL = 1500 * time.Millisecond
	a := startNode(t, cfg)
	cfgB := testConfig(srv.client(t), "b")
	cfgB.LastSeenTTL = cfg.LastSeenTTL
	b := startNode(t, cfgB)
	b.follow(t, "alice") // throughout: b's router knows her record all along
	a.follow(t, "alice")
	a.SetUser("alice", 1, 0)
	a.SetRecord("alice", protocol.Set{Mode: protocol.ModeDND})
	eventually(t, "alice's record", func(ct *assert.CollectT) {
		assert.Equal(ct, protocol.Record{Mode: protocol.ModeDND}, recordIn(ct, a.Engine, "alice"))
	})
	a.SetUser("alice", 0, 0)
	eventually(t, "alice offline", func(ct *assert.CollectT) {
		st, err := a.Status(context.Background(), "alice")
		assert.NoError(ct, err)
		assert.Equal(ct, 0, st.Conns)
		assert.Equal(ct, protocol.Record{Mode: protocol.ModeDND}, st.Record, "kept within the TTL")
	})
	time.Sleep(cfg.LastSeenTTL + 100*time.Millisecond)
	for _, n := range []*node{a, b} { // as each Node's clock does
		n.Apply(presence.Change{Kind: presence.ChangeForget, UID: "alice"})
	}
	recs, err := a.Records(context.Background(), []string{"alice"})
	require.NoError(t, err)
	assert.Empty(t, recs)
	a.SetUser("alice", 1, 0)
	a.SetInfo("alice", []byte(`{"name":"A"}`))
	eventually(t, "alice back with her info only, on both nodes", func(ct *assert.CollectT) {
		want := protocol.Record{Info: []byte(`{"name":"A"}`)}
		assert.Equal(ct, want, recordIn(ct, a.Engine, "alice"))
		for _, n := range []*node{a, b} {
			n.rec.mu.Lock()
			assert.Equal(ct, want, n.rec.records["alice"], "on %s", n.Node())
			n.rec.mu.Unlock()
		}
	})
}
