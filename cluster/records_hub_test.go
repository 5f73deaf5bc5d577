package cluster

import (
	"testing"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
)

// recordFrame is a presence or status frame's records.
type recordFrame struct {
	Type    string                     `json:"type"`
	Joins   []string                   `json:"joins"`
	Leaves  []string                   `json:"leaves"`
	Users   map[string]protocol.Record `json:"users"`
	Updated map[string]protocol.Record `json:"updated"`
}

// Over real sockets on two hubs: a set frame on one reaches a client on
// the other as updated, and invisible shows there as a leave. Every frame
// is checked against docs/schema.
func TestTwoHubsCarryRecords(t *testing.T) {
	srv := startRedis(t)
	hsA, _ := startHub(t, srv, "a")
	hsB, _ := startHub(t, srv, "b")

	bob := dial(t, hsB, "bob")
	next(t, bob, "bob's lobby", func(f frame) bool { return f.Type == "joined" })
	alice := dial(t, hsA, "alice")
	next(t, alice, "alice's lobby", func(f frame) bool { return f.Type == "joined" })
	nextAs(t, bob, "alice joins on b", func(f recordFrame) bool {
		return f.Type == "presence" && assert.ObjectsAreEqual([]string{"alice"}, f.Joins)
	})

	require.NoError(t, alice.WriteMessage(websocket.TextMessage, []byte(`{"type":"set","mode":"dnd","note":{"text":"focus"}}`)))
	got := nextAs(t, bob, "alice's record on b", func(f recordFrame) bool { _, ok := f.Updated["alice"]; return ok })
	assert.Equal(t, protocol.Record{Mode: protocol.ModeDND, Note: &protocol.Note{Text: "focus"}}, got.Updated["alice"])

	require.NoError(t, alice.WriteMessage(websocket.TextMessage, []byte(`{"type":"set","mode":"invisible"}`)))
	left := nextAs(t, bob, "alice leaves, as bob sees it", func(f recordFrame) bool { return len(f.Leaves) > 0 })
	assert.Equal(t, []string{"alice"}, left.Leaves)
	assert.NotContains(t, left.Updated, "alice", "bob never sees mode invisible")
}
