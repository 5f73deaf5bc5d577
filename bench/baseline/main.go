// Command baseline is the WebSocket keepalive server a Go developer usually
// writes by hand with gorilla/websocket, kept as the yardstick for presenced:
// per connection a reader goroutine, a writer goroutine, a time.Ticker for
// pings, a read deadline extended on every pong (and every message), a
// 256-slot send channel and 1 KiB buffers.
//
// It speaks the subset of presenced's protocol that loadgen uses:
// the welcome frame with timeout_ms, {"type":"ping"} -> {"type":"pong"}, an
// error frame for anything else, and close 4408 "idle timeout" when nothing
// arrived for -timeout. It keeps no presence.
//
//	baseline -addr 127.0.0.1:9090 -timeout 30s
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9090", "listen address")
	timeout := flag.Duration("timeout", 30*time.Second, "close a connection after this long without an inbound frame")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *timeout <= 0 {
		log.Error("-timeout must be positive")
		os.Exit(2)
	}

	srv := newServer(*timeout, log)
	mux := http.NewServeMux()
	mux.Handle("GET /ws", srv)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	hs := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- hs.ListenAndServe() }()
	log.Info("baseline listening", "addr", *addr, "timeout", *timeout)
	select {
	case err := <-errc:
		log.Error("listen", "err", err)
		os.Exit(1)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.closeAll()
	if err := hs.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("shutdown", "err", err)
	}
}
