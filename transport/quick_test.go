package transport_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
)

// pings is n client frames of {"type":"ping"}, back to back, each with its
// own mask.
func pings(n int) []byte {
	var all []byte
	for range n {
		all = append(all, clientFrame(fin|opText, appPing)...)
	}
	return all
}

// textFrames reads n text frames from the server, failing on any other.
func textFrames(t *testing.T, c net.Conn, br *bufio.Reader, n int) []string {
	t.Helper()
	got := make([]string, 0, n)
	for range n {
		op, payload := serverFrame(t, c, br)
		require.Equal(t, opText, op, "frame %d of %d: %q", len(got), n, payload)
		got = append(got, string(payload))
	}
	return got
}

// welcomed opens a WebSocket by hand and reads its welcome.
func welcomed(t *testing.T, s *testServer, uid string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, br := s.upgradeRaw(t, uid)
	assert.Contains(t, string(serverFrameOf(t, c, br, opText)), `"type":"welcome"`)
	return c, br
}

// A ping the poller answers on its own thread keeps its turn: behind the
// answer to a join the inbox still holds, and between the answers of the
// frames around it when they come in the same read or in parts.
func TestQuickPingKeepsOrder(t *testing.T) {
	s := startServer(t, testConfig())
	c, br := welcomed(t, s, "orderly")

	join := func(ch string) []byte {
		return clientFrame(fin|opText, fmt.Appendf(nil, `{"type":"join","channel":%q}`, ch))
	}
	joined := func(ch string) string {
		return fmt.Sprintf(`{"type":"joined","channel":%q,"count":1,"members":["orderly"]}`, ch)
	}
	const pong = `{"type":"pong"}`
	var want []string
	for i := range 15 { // 45 frames: within the inbox's 64
		ch := fmt.Sprint("c", i)
		switch i % 3 {
		case 0: // the join and the ping in writes of their own
			write(t, c, join(ch))
			write(t, c, pings(2))
		case 1: // in one write
			write(t, c, append(join(ch), pings(2)...))
		case 2: // the pings split across writes, the second part alone
			p := pings(2)
			write(t, c, append(join(ch), p[:25]...))
			write(t, c, p[25:])
		}
		want = append(want, joined(ch), pong, pong)
	}
	assert.Equal(t, want, textFrames(t, c, br, len(want)))
}

// Whole pings in one read are answered, every one; pings with part of a
// frame after them, or a frame that is not a ping, go the old way and are
// answered as well, in order.
func TestQuickPingBatches(t *testing.T) {
	cfg := testConfig()
	cfg.FrameRate, cfg.FrameBurst = 1e6, 1e6
	s := startServer(t, cfg)
	c, br := welcomed(t, s, "batcher")

	pong := `{"type":"pong"}`
	many := func(n int) []string { return slices.Repeat([]string{pong}, n) }

	write(t, c, pings(1))
	assert.Equal(t, many(1), textFrames(t, c, br, 1), "one ping")
	write(t, c, pings(40)) // more than one write of pongs holds
	assert.Equal(t, many(40), textFrames(t, c, br, 40), "forty pings in one write")

	p := pings(3)
	write(t, c, p[:len(p)-4]) // two whole, then part of the third
	assert.Equal(t, many(2), textFrames(t, c, br, 2), "the whole ones before a partial one")
	write(t, c, p[len(p)-4:])
	assert.Equal(t, many(1), textFrames(t, c, br, 1), "the partial one, once whole")

	other := clientFrame(fin|opText, []byte(`{"type":"ping" }`)) // a ping, but not by its bytes
	write(t, c, append(append(pings(1), other...), pings(1)...))
	assert.Equal(t, many(3), textFrames(t, c, br, 3), "pings around another spelling")

	write(t, c, append(pings(1), clientFrame(fin|opPing, []byte("x"))...))
	assert.Equal(t, pong, string(serverFrameOf(t, c, br, opText)))
	assert.Equal(t, "x", string(serverFrameOf(t, c, br, opPong)), "a control frame after a ping")
}

// smallBuffers opens a WebSocket, past its welcome, whose socket buffers
// are small on both sides, to a server with no rate limit: a client that
// stops reading fills them soon.
func smallBuffers(t *testing.T, uid string) (net.Conn, *bufio.Reader) {
	cfg := testConfig()
	cfg.FrameRate, cfg.FrameBurst, cfg.ByteRate = 1e6, 1e6, 1<<40
	cfg.SocketBuffer = 4096
	s := startServerWith(t, cfg, serverOptions{sendBuffer: 4096})
	c, br := welcomed(t, s, uid)
	require.NoError(t, c.(*net.TCPConn).SetReadBuffer(4096))
	return c, br
}

// Pongs the socket cannot take at once are written later, whole and in
// order, by the writer, when the client reads again.
func TestQuickPongsToAFullSocket(t *testing.T) {
	c, br := smallBuffers(t, "stuffed")

	// A ping a write, 3,000 in all: their pongs, 51,000 bytes, are far more
	// than the two buffers hold while the client does not read, and the
	// reader, which answers each read's pings itself while the writer is
	// idle, meets the full socket part way through a pong.
	const n = 3000
	for range n {
		write(t, c, pings(1))
		time.Sleep(50 * time.Microsecond) // a read each, mostly
	}
	for i, f := range textFrames(t, c, br, n) {
		require.Equal(t, `{"type":"pong"}`, f, "frame %d", i)
	}
	write(t, c, pings(1))
	assert.Equal(t, `{"type":"pong"}`, string(serverFrameOf(t, c, br, opText)))
}

// A close frame that comes while the writer still owes the rest of pongs
// the socket did not take is never echoed inside one: every frame the
// client reads is a whole pong, until the close frame. (The stream may end
// without it, or inside a frame the writer was still writing: the client
// was not reading, and the server closes once the close frame is read.)
func TestQuickPongsOwedThenClose(t *testing.T) {
	c, br := smallBuffers(t, "closer")
	wrote := make(chan error, 1)
	go func() {
		var err error
		for i := 0; i < 3000 && err == nil; i++ {
			_, err = c.Write(pings(1))
			time.Sleep(50 * time.Microsecond) // a read each, mostly
		}
		if err == nil {
			_, err = c.Write(clientFrame(fin|opClose, []byte{0x03, 0xe8}))
		}
		wrote <- err
	}()
	// The client reads nothing until its writes are done or blocked, so
	// that the server's buffers fill and its pongs stop part way.
	select {
	case err := <-wrote:
		require.NoError(t, err)
		wrote <- nil
	case <-time.After(2 * time.Second):
	}
	require.NoError(t, c.SetReadDeadline(time.Now().Add(waitLong)))
	pong := append([]byte{fin | opText, 15}, `{"type":"pong"}`...)
	pongs := 0
	for {
		head, err := br.Peek(2)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if head[0] == fin|opClose {
			_, payload := serverFrame(t, c, br)
			assert.Equal(t, websocket.CloseNormalClosure, closeCode(t, payload))
			break
		}
		got := make([]byte, len(pong))
		n, err := io.ReadFull(br, got)
		if err == io.ErrUnexpectedEOF {
			require.Equal(t, pong[:n], got[:n], "the cut frame, %d", pongs)
			break
		}
		require.NoError(t, err)
		require.Equal(t, pong, got, "frame %d", pongs)
		pongs++
	}
	require.NoError(t, <-wrote)
	t.Logf("%d pongs before the close frame or the end", pongs)
}

// The limits hold on the quick path: a client flooding pings is closed for
// flooding with 1008, after at most one error frame.
func TestQuickPingFloodClosed(t *testing.T) {
	cfg := testConfig()
	cfg.FrameRate, cfg.FrameBurst = 1, 2
	s := startServer(t, cfg)
	c, br := welcomed(t, s, "flooder")

	write(t, c, pings(2))
	assert.Equal(t, []string{`{"type":"pong"}`, `{"type":"pong"}`}, textFrames(t, c, br, 2))
	for range 20 {
		if _, err := c.Write(pings(16)); err != nil {
			break // closed already
		}
	}
	// The error frame goes out unless the cut came in the same read: a
	// closing connection drops what it queued.
	for {
		op, payload := serverFrame(t, c, br)
		if op == opText {
			assert.Contains(t, string(payload), "too many messages")
			continue
		}
		require.Equal(t, opClose, op)
		assert.Equal(t, protocol.ClosePolicyViolation, closeCode(t, payload))
		assert.Equal(t, protocol.ReasonRateLimit, string(payload[2:]))
		break
	}
	s.waitMetric(t, "presenced_closes_total", map[string]string{"reason": "flood"}, 1)
}

// A ping over MaxMessage is not the quick path's: it closes with 1009 as
// any frame over the limit does.
func TestQuickPingOverMaxMessage(t *testing.T) {
	cfg := testConfig()
	cfg.MaxMessage = 10
	s := startServer(t, cfg)
	c, br := welcomed(t, s, "tiny")
	write(t, c, pings(1))
	assert.Equal(t, websocket.CloseMessageTooBig, closeCode(t, serverFrameOf(t, c, br, opClose)))
	s.waitMetric(t, "presenced_closes_total", map[string]string{"reason": "too_big"}, 1)
}
