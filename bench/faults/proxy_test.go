package main

import (
	"bufio"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echo serves lines back on a loopback port until the test ends.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

type lineConn struct {
	net.Conn
	r *bufio.Reader
}

func dialLink(t *testing.T, l *link) *lineConn {
	c, err := net.Dial("tcp", l.addr())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &lineConn{c, bufio.NewReader(c)}
}

// roundTrip sends s and reads a line back within d.
func (c *lineConn) roundTrip(t *testing.T, s string, d time.Duration) (string, error) {
	_, err := io.WriteString(c, s+"\n")
	require.NoError(t, err)
	return c.readLine(d)
}

func (c *lineConn) readLine(d time.Duration) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	line, err := c.r.ReadString('\n')
	if len(line) > 0 {
		line = line[:len(line)-1]
	}
	return line, err
}

func newTestLink(t *testing.T) *link {
	l, err := newLink(echo(t))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, l.close()) })
	return l
}

// A stalled link holds the bytes and delivers them, in order, on heal.
func TestLinkStallDeliversLate(t *testing.T) {
	l := newTestLink(t)
	c := dialLink(t, l)
	got, err := c.roundTrip(t, "before", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "before", got)

	l.set(stall)
	_, err = io.WriteString(c, "one\ntwo\n")
	require.NoError(t, err)
	_, err = c.readLine(300 * time.Millisecond)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "nothing comes through a stall")
	l.heal()
	for _, want := range []string{"one", "two"} {
		got, err := c.readLine(10 * time.Second)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
}

// A blackholed link throws bytes away; the connections that lost some are
// closed on heal, and new ones work.
func TestLinkBlackholeLosesBytes(t *testing.T) {
	l := newTestLink(t)
	c := dialLink(t, l)
	l.set(blackhole)
	_, err := c.roundTrip(t, "lost", 300*time.Millisecond)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "nothing comes back through a blackhole")
	l.heal()
	_, err = c.readLine(10 * time.Second)
	assert.ErrorIs(t, err, io.EOF, "a connection that lost bytes is closed on heal")
	got, err := dialLink(t, l).roundTrip(t, "after", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "after", got)
}

// A cut link closes its connections and refuses new ones until heal.
func TestLinkCutCloses(t *testing.T) {
	l := newTestLink(t)
	c := dialLink(t, l)
	_, err := c.roundTrip(t, "before", 10*time.Second)
	require.NoError(t, err)
	l.set(cut)
	_, err = c.readLine(10 * time.Second)
	assert.ErrorIs(t, err, io.EOF, "an open connection is closed")
	_, err = dialLink(t, l).readLine(10 * time.Second)
	assert.ErrorIs(t, err, io.EOF, "a new connection is closed at once")
	l.heal()
	got, err := dialLink(t, l).roundTrip(t, "after", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "after", got)
}
