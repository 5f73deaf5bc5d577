package transport_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// joinPathBegins and joinPathEnds do nothing: they mark where
// TestJoinPath's join starts and where its diff has arrived, for a tracer
// that counts what the join crosses on its way (see bench/joinpath.sh).
//
//go:noinline
func joinPathBegins() {}

//go:noinline
func joinPathEnds() {}

// A join frame, from the socket to the diff it makes for another member:
// the joiner's own answer, then, at the tick, the observer's presence diff.
// Both clients speak raw frames, so that between the marks only the server
// runs code a tracer of the project and of gorilla sees.
func TestJoinPath(t *testing.T) {
	s := startServer(t, testConfig())
	obs, obr := s.upgradeQuery(t, "uid=obs&channels=lobby")
	require.Contains(t, string(serverFrameOf(t, obs, obr, opText)), `"type":"welcome"`)
	require.Contains(t, string(serverFrameOf(t, obs, obr, opText)), `"type":"joined"`)
	joe, jbr := welcomed(t, s, "joe")

	joinPathBegins()
	write(t, joe, clientFrame(fin|opText, []byte(`{"type":"join","channel":"lobby"}`)))
	answer := string(serverFrameOf(t, joe, jbr, opText))
	s.step(1)
	diff := string(serverFrameOf(t, obs, obr, opText))
	joinPathEnds()

	assert.Contains(t, answer, `"channel":"lobby"`)
	assert.Contains(t, answer, `"obs"`, "the joiner's snapshot names the member already there")
	assert.Contains(t, diff, `"joins":["joe"]`)
}
