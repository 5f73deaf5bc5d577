//go:build linux

package transport

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// socketWait bounds the waits here; like the package's other tests, it is
// generous enough for -race on a busy machine and only keeps a broken test
// from hanging.
const socketWait = 20 * time.Second

// adopted returns a socket taken over from the server side of a loopback
// TCP connection and registered with a running poller, and the client side.
func adopted(t *testing.T) (*wire, net.Conn) {
	t.Helper()
	p, err := newPoller()
	require.NoError(t, err)
	go p.run()
	t.Cleanup(p.close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	server, err := ln.Accept()
	require.NoError(t, err)
	// A small send buffer, so that a few hundred KB fill it.
	require.NoError(t, server.(*net.TCPConn).SetWriteBuffer(16<<10))

	c := &conn{hub: &Hub{poller: p}}
	require.NoError(t, c.w.sock.adopt(c, server))
	require.NoError(t, p.add(c))
	server.Close()
	c.w.polled = true
	t.Cleanup(func() { c.w.Close() })
	return &c.w, client
}

func TestSocketWriteWaitsForRoomAndLosesNothing(t *testing.T) {
	w, client := adopted(t)
	want := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MB: the buffer fills many times
	w.SetWriteDeadline(time.Now().Add(socketWait))
	got := make(chan []byte, 1)
	go func() {
		// A slow reader: the writer waits for room again and again.
		var buf bytes.Buffer
		chunk := make([]byte, 64<<10)
		for buf.Len() < len(want) {
			n, err := client.Read(chunk)
			buf.Write(chunk[:n])
			if err != nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		got <- buf.Bytes()
	}()
	n, err := w.Write(want)
	require.NoError(t, err)
	assert.Equal(t, len(want), n)
	assert.True(t, bytes.Equal(want, <-got), "the bytes that arrived are the bytes written")
	assert.Equal(t, "127.0.0.1", w.RemoteAddr().(*net.TCPAddr).IP.String())
	assert.Equal(t, client.LocalAddr().String(), w.RemoteAddr().String())
}

func TestSocketWriteTimesOutOnAReaderThatStopped(t *testing.T) {
	w, _ := adopted(t)
	w.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	_, err := w.Write(make([]byte, 8<<20)) // far more than both buffers hold
	require.Error(t, err)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout(), "a write past its deadline is a timeout, as net's are: %v", err)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
}

func TestSocketCloseEndsABlockedWriteAndTheConnection(t *testing.T) {
	w, client := adopted(t)
	w.SetWriteDeadline(time.Time{}) // none: only the close can end it
	done := make(chan error, 1)
	go func() {
		_, err := w.Write(make([]byte, 8<<20))
		done <- err
	}()
	require.Eventually(t, func() bool { return w.sock.writable.Load() != nil }, socketWait, time.Millisecond, "the write waits for room")
	require.NoError(t, w.Close())
	select {
	case err := <-done:
		assert.True(t, errors.Is(err, net.ErrClosed), "%v", err)
	case <-time.After(socketWait):
		t.Fatal("a close did not end the blocked write")
	}
	assert.ErrorIs(t, w.Close(), net.ErrClosed, "closing twice")
	// The descriptor is closed once the write let go of it: the client
	// reads what was sent and then the end.
	client.SetReadDeadline(time.Now().Add(socketWait))
	_, err := io.Copy(io.Discard, client)
	require.NoError(t, err)
	_, err = w.Write([]byte("x"))
	assert.ErrorIs(t, err, net.ErrClosed)
}
