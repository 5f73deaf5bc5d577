package transport_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A ping is answered the same whether it is the usual bytes, recognised
// without decoding, or another spelling that goes through the parser; and
// in the order sent, after the error for a bad frame before it.
func TestEverySpellingOfPingIsAnswered(t *testing.T) {
	s := startServer(t, testConfig())
	ws, _ := s.dial(t, "alice")
	defer ws.Close()
	for _, ping := range []string{`{"type":"ping"}`, `{ "type": "ping" }`, `{"type":"ping","ref":1}`, `{"type":"ping"}`} {
		send(t, ws, `{"type":"ping"`) // cut short: an error first
		send(t, ws, ping)
		assert.Equal(t, "error", readFrame(t, ws)["type"], ping)
		assert.Equal(t, map[string]any{"type": "pong"}, readFrame(t, ws), ping)
	}
}
