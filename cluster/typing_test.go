package cluster

import (
	"encoding/json"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

// typingFrame is a typing frame as a client reads it.
type typingFrame struct {
	Type    string   `json:"type"`
	Channel string   `json:"channel"`
	Users   []string `json:"users"`
	Count   int      `json:"count"`
}

// A user typing on one node is seen typing by a member on another, and its
// chat there ends it on both.
func TestTypingCrossesNodes(t *testing.T) {
	srv := startRedis(t)
	hsA, _ := startHub(t, srv, "a")
	hsB, _ := startHub(t, srv, "b")
	bob := dial(t, hsB, "bob")
	next(t, bob, "bob's lobby", func(f frame) bool { return f.Type == "joined" })
	alice := dial(t, hsA, "alice")
	next(t, alice, "alice's lobby", func(f frame) bool { return f.Type == "joined" })

	isTyping := func(f typingFrame) bool { return f.Type == "typing" }
	require.NoError(t, alice.WriteMessage(websocket.TextMessage, []byte(`{"type":"typing","channel":"lobby"}`)))
	got := nextAs(t, bob, "alice typing, on b", isTyping)
	assert.Equal(t, typingFrame{Type: "typing", Channel: "lobby", Users: []string{"alice"}}, got)
	assert.Equal(t, got, nextAs(t, alice, "alice typing, on a", isTyping))

	require.NoError(t, alice.WriteMessage(websocket.TextMessage, []byte(`{"type":"chat","channel":"lobby","text":"hi"}`)))
	next(t, bob, "alice's chat", func(f frame) bool { return f.Type == "chat" })
	assert.Equal(t, typingFrame{Type: "typing", Channel: "lobby", Users: []string{}}, nextAs(t, bob, "typing ended, on b", isTyping))
	assert.Equal(t, typingFrame{Type: "typing", Channel: "lobby", Users: []string{}}, nextAs(t, alice, "typing ended, on a", isTyping))
}

// A typing message says who types, and a chat line whom it is from, on the
// wire between nodes.
func TestWireMessageCarriesTyping(t *testing.T) {
	var ev wireEvent
	for _, w := range []wireMessage{{Kind: presence.MessageTyping, From: "alice"}, {Kind: presence.MessageChat, Frame: json.RawMessage(`{"type":"chat"}`), Type: "chat", From: "bob"}} {
		data, err := json.Marshal(w)
		require.NoError(t, err)
		ev = wireEvent{}
		require.NoError(t, json.Unmarshal(data, &ev))
		assert.Equal(t, w.From, ev.From)
		assert.Equal(t, w.Kind, ev.Kind)
	}
}
