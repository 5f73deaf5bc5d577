package presence

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// When a user's first connection closes, its second still gets what is
// meant for the user: a message, and its disconnect.
func TestSecondTabOutlivesTheFirst(t *testing.T) {
	n := newNode(t, Config{})
	ctx := context.Background()
	first := connect(t, n, "alice")
	second := connect(t, n, "alice")
	n.Disconnect(first)
	second.take()
	require.NoError(t, n.Send(ctx, "alice", json.RawMessage(`{"n":1}`)))
	assert.Equal(t, []string{`{"type":"message","data":{"n":1}}`}, second.take())
	require.NoError(t, n.DisconnectUser(ctx, "alice"))
	// Closed on a goroutine of its own, off the Engine's.
	require.Eventually(t, func() bool {
		second.mu.Lock()
		defer second.mu.Unlock()
		return len(second.closes) == 1
	}, 10*time.Second, time.Millisecond, "the disconnect reaches it")
}
