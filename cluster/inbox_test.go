package cluster

import (
	"fmt"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// maskedText is a client's text frame, masked with the zero key, which
// leaves the payload as it is; payload is under 126 bytes.
func maskedText(payload string) []byte {
	return append([]byte{0x81, 0x80 | byte(len(payload)), 0, 0, 0, 0}, payload...)
}

// A chat a client sent just before it went reaches the channel's members on
// the other node: the close, a FIN or a close frame in the same segment, is
// handled after the chat was handed to Redis.
func TestAChatBeforeTheCloseCrossesNodes(t *testing.T) {
	srv := startRedis(t)
	hsA, _, _ := startHubWith(t, srv, "a", nil)
	hsB, _, _ := startHubWith(t, srv, "b", nil)
	bob := dial(t, hsB, "bob")
	next(t, bob, "bob's lobby", func(f frame) bool { return f.Type == "joined" })

	closes := map[string]func(c net.Conn, chat []byte) error{
		"FIN": func(c net.Conn, chat []byte) error {
			if _, err := c.Write(chat); err != nil {
				return err
			}
			return c.(*net.TCPConn).CloseWrite()
		},
		"close frame in the same segment": func(c net.Conn, chat []byte) error {
			_, err := c.Write(append(chat, 0x88, 0x82, 0, 0, 0, 0, 0x03, 0xe8))
			return err
		},
	}
	n := 0
	for name, bye := range closes {
		const rounds = 10
		for i := range rounds {
			n++
			uid := fmt.Sprintf("alice-%d", n)
			alice := dial(t, hsA, uid)
			next(t, alice, "alice's lobby", func(f frame) bool { return f.Type == "joined" })
			text := fmt.Sprintf("bye %d before a %s", i, name)
			require.NoError(t, bye(alice.NetConn(), maskedText(`{"type":"chat","channel":"lobby","text":"`+text+`"}`)))
			next(t, bob, text, func(f frame) bool { return f.Type == "chat" && f.From == uid && f.Text == text })
		}
		t.Logf("%d of %d chats sent just before a %s reached the other node", rounds, rounds, name)
	}
}
