package transport_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/transport"
)

// BenchmarkPingPong is one {"type":"ping"} answered with {"type":"pong"}
// over a real loopback socket, through the polled reader, the inbox and the
// writer. The client writes pre-masked bytes and reads into a fixed buffer,
// so the allocations reported are the server's.
func BenchmarkPingPong(b *testing.B) {
	cfg := testConfig()
	cfg.Registerer = prometheus.NewRegistry()
	// No rate limit: the benchmark sends as fast as the answers come.
	cfg.FrameRate, cfg.FrameBurst, cfg.ByteRate = 1e9, 1e9, 1<<40
	hub, err := transport.NewManual(cfg)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(hub)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		if err := hub.Shutdown(ctx); err != nil {
			b.Error(err)
		}
		srv.Close()
	}()
	c, br := benchUpgrade(b, srv.Listener.Addr().String())
	defer c.Close()

	ping := []byte{0x81, 0x80 | 15, 1, 2, 3, 4}
	for i, ch := range []byte(`{"type":"ping"}`) {
		ping = append(ping, ch^ping[2+i&3])
	}
	pong := append([]byte{0x81, 15}, `{"type":"pong"}`...)
	got := make([]byte, len(pong))
	if err := c.SetDeadline(time.Now().Add(10 * time.Minute)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(ping); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(br, got); err != nil {
			b.Fatal(err)
		}
		if !bytes.Equal(got, pong) {
			b.Fatalf("answer %q, want %q", got, pong)
		}
	}
}

// benchUpgrade opens a WebSocket by hand and reads the welcome.
func benchUpgrade(b *testing.B, addr string) (net.Conn, *bufio.Reader) {
	c, err := net.DialTimeout("tcp", addr, waitLong)
	if err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(c, "GET /ws?uid=bench HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", addr)
	br := bufio.NewReader(c)
	if err := c.SetReadDeadline(time.Now().Add(waitLong)); err != nil {
		b.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		b.Fatalf("upgrade: %v %v", resp, err)
	}
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		b.Fatal(err)
	}
	n := int(h[1] & 0x7f)
	if n == 126 {
		var l [2]byte
		if _, err := io.ReadFull(br, l[:]); err != nil {
			b.Fatal(err)
		}
		n = int(l[0])<<8 | int(l[1])
	}
	welcome := make([]byte, n)
	if _, err := io.ReadFull(br, welcome); err != nil || !bytes.Contains(welcome, []byte(`"welcome"`)) {
		b.Fatalf("welcome: %q %v", welcome, err)
	}
	return c, br
}
