package presence

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
)

// A user who leaves a channel, changes its record and comes back within a
// tick nets to no join or leave there, but its new record still reaches
// the channel's members.
func TestRecordChangedWhileOutOfAChannel(t *testing.T) {
	n := newNode(t, Config{})
	ctx := context.Background()
	obs := connect(t, n, "obs", "lobby")
	alice := connect(t, n, "alice", "lobby")
	n.Step()
	obs.take()
	require.NoError(t, n.Leave(alice, "lobby"))
	require.NoError(t, n.Set(alice, protocol.Set{NoteSet: true, Note: &protocol.Note{Text: "lunch"}}))
	require.NoError(t, n.Join(ctx, alice, "lobby"))
	n.Step()
	assert.Equal(t, []string{`{"type":"presence","channel":"lobby","count":2,"joins":[],"leaves":[],"updated":{"alice":{"note":{"text":"lunch"}}}}`}, obs.take())
}
