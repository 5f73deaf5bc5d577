//go:build linux

// Command floor is the least a server can do for presenced's load: one
// thread waiting in epoll_wait(2), its own HTTP/1.1 upgrade and WebSocket
// framing on the raw sockets, {"type":"ping"} answered from pre-encoded bytes
// without decoding JSON, and an idle timeout found by a sweep of a table
// indexed by file descriptor, 16 bytes a connection. It keeps no presence and
// no goroutine, buffer or timer per connection.
//
// It speaks the subset of presenced's protocol that loadgen uses: GET /ws
// with ?uid=, the welcome frame with timeout_ms, ping -> pong, an error frame
// for any other text, WebSocket ping, pong and close, and close 4408 "idle
// timeout" between -timeout and -timeout plus -tick after the last frame.
// GET /healthz answers 200. It is the yardstick of CPU per request and memory
// per connection, not a server to run: a frame over 4 KiB, a fragmented
// message or a client too slow to take an answer in one write(2) is closed.
//
//	floor -addr 127.0.0.1:9091 -timeout 30s -tick 1s
package main

import (
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9091", "listen address (IPv4 host:port)")
	timeout := flag.Duration("timeout", 30*time.Second, "close a connection after this long without an inbound frame")
	tick := flag.Duration("tick", time.Second, "how often idle connections are looked for")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *timeout <= 0 || *tick <= 0 {
		log.Error("-timeout and -tick must be positive")
		os.Exit(2)
	}
	s, err := listen(*addr, *timeout, *tick, log)
	if err != nil {
		log.Error("listen", "err", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		s.Stop()
	}()
	log.Info("floor listening", "addr", s.Addr(), "timeout", *timeout, "tick", *tick)
	if err := s.Serve(); err != nil {
		log.Error("serve", "err", err)
		os.Exit(1)
	}
}
