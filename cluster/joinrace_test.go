package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/transport"
)

// A user who turns invisible and at once joins a channel its node already
// follows never shows in that channel: the set must reach the node's view
// before, or with, the join it counts. Tried many times, as it is a race.
func TestInvisibleThenJoinShowsNothing(t *testing.T) {
	srv := startRedis(t)
	// A tick of a millisecond: a tick then often falls between the join's
	// echo from Redis and the set's, which the writer sends after it.
	hs, _, _ := startHubConfig(t, testConfig(srv.client(t), "a"), transport.Config{Slots: 20001, Tick: time.Millisecond}, nil)
	bob := dial(t, hs, "bob")
	next(t, bob, "bob's lobby", func(f frame) bool { return f.Type == "joined" })
	require.NoError(t, bob.WriteMessage(websocket.TextMessage, []byte(`{"type":"join","channel":"room"}`)))
	next(t, bob, "bob's room", func(f frame) bool { return f.Type == "joined" })
	var leaks []string
	for i := range 20 {
		x := fmt.Sprintf("x%d", i)
		// Sent at once: the set and the join land in the writer's next
		// flush together, behind the one writing the connect.
		ws := dial(t, hs, x)
		require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"set","mode":"invisible"}`)))
		require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"join","channel":"room"}`)))
		nextAs(t, ws, x+" in room", func(f roomFrame) bool { return f.Type == "joined" && f.Channel == "room" })
		// A visible marker after it: every room frame before it is what
		// bob heard of x.
		m := fmt.Sprintf("m%d", i)
		mark := dial(t, hs, m)
		next(t, mark, m+"'s lobby", func(f frame) bool { return f.Type == "joined" })
		require.NoError(t, mark.WriteMessage(websocket.TextMessage, []byte(`{"type":"join","channel":"room"}`)))
		nextAs(t, bob, m+" joins room", func(f roomFrame) bool {
			if f.Type != "presence" || f.Channel != "room" {
				return false
			}
			for _, u := range append(f.Joins, f.Leaves...) {
				if u == x {
					leaks = append(leaks, fmt.Sprintf("%s: joins %v leaves %v", x, f.Joins, f.Leaves))
				}
			}
			return strings.Contains(strings.Join(f.Joins, ","), m)
		})
		require.NoError(t, ws.Close())
		require.NoError(t, mark.Close())
	}
	assert.Empty(t, leaks, "bob saw invisible users in room")
}

type roomFrame struct {
	Type    string   `json:"type"`
	Channel string   `json:"channel"`
	Joins   []string `json:"joins"`
	Leaves  []string `json:"leaves"`
}
