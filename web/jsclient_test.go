package web_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/apicheck"
	"github.com/presenced/presenced/internal/nginxtest"
	"github.com/presenced/presenced/transport"
	"github.com/presenced/presenced/web"
)

// TestJSClient runs the JavaScript client's tests (web/client/test, with
// node --test) against real Hubs on loopback: one in demo mode with a
// cuttable proxy in front and, where nginx is installed, a plain nginx
// proxy_pass in front (no upgrade headers: WebSockets do not open through
// it), one with a short timeout, one with JWTs. The
// Node side finds them in environment variables; each Hub also answers
// POST /test/disconnect?uid= (Hub.Disconnect, close 4403) and, in demo
// mode, POST /test/cut, which drops every connection through the proxy as
// a network failure would.
func TestJSClient(t *testing.T) {
	node := needNode(t)
	const secret, apiKey = "js-client-test-secret", "js-client-test-key"

	// nginx sends its upstream's name as the Host.
	demo := startHub(t, transport.Config{Slots: 101, Tick: 50 * time.Millisecond, TypingTTL: 500 * time.Millisecond,
		Hosts: []string{nginxtest.Upstream}})
	proxy := startProxy(t, demo.Listener.Addr().String())
	demo.control.HandleFunc("POST /test/cut", func(w http.ResponseWriter, r *http.Request) {
		proxy.cut()
		w.WriteHeader(http.StatusNoContent)
	})
	short := startHub(t, transport.Config{Slots: 11, Tick: 50 * time.Millisecond})
	jwtHub := startHub(t, transport.Config{Slots: 101, Tick: 50 * time.Millisecond,
		Auth: transport.JWTAuth([]byte(secret)), APIKey: apiKey})

	// $JS_TESTS narrows the run to some files, e.g. JS_TESTS='closes*'.
	pattern := cmp.Or(os.Getenv("JS_TESTS"), "*.test.js")
	files, err := filepath.Glob(filepath.Join("client", "test", pattern))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no Node tests in client/test")
	for i, f := range files {
		files[i], _ = filepath.Rel("client", f)
	}
	nginxURL := ""
	if _, err := nginxtest.Find(); err == nil || os.Getenv("CI") != "" {
		nginxURL = nginxtest.Start(t, demo.Listener.Addr().String()).URL
	} else {
		tellTerminal(t.Name() + ": no nginx, so the fallback through it is skipped: " + err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"--test", "--test-reporter=spec", "--test-concurrency=1"}, files...)...)
	cmd.Dir = "client"
	cmd.Env = append(os.Environ(),
		"PRESENCED_URL="+demo.URL,
		"PRESENCED_PROXY_URL=http://"+proxy.addr(),
		"PRESENCED_NGINX_URL="+nginxURL,
		"PRESENCED_SHORT_URL="+short.URL,
		"PRESENCED_JWT_URL="+jwtHub.URL,
		"PRESENCED_JWT_SECRET="+secret,
		"PRESENCED_API_KEY="+apiKey,
	)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	require.NoError(t, err, "node --test failed")
}

// needNode returns the node binary when it and web/client/node_modules are
// there; else it skips, except in CI, where that is a broken setup.
func needNode(t *testing.T) string {
	t.Helper()
	fail := func(msg string) {
		if os.Getenv("CI") != "" {
			t.Fatal(msg + "; CI is set, so this is a failure")
		}
		tellTerminal(t.Name() + " skipped: " + msg)
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		fail("no node on PATH: install Node 20 to run the JavaScript client's tests")
	}
	if _, err := os.Stat(filepath.Join("client", "node_modules", "ws")); err != nil {
		fail("web/client/node_modules is missing: run `npm ci` in web/client to run the JavaScript client's tests")
	}
	return node
}

// tellTerminal writes msg to the terminal go test runs in, if any: of a
// package that passes, go test shows only its "ok" line unless -v, so a
// skip would go unseen. With -v the skip's own line says it.
func tellTerminal(msg string) {
	if testing.Verbose() {
		return
	}
	tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0)
	if err != nil {
		return // no terminal: a CI log, where CI=true fails instead
	}
	defer tty.Close()
	fmt.Fprintf(tty, "--- SKIP: web: %s\n", msg)
}

type testHub struct {
	*httptest.Server
	hub     *transport.Hub
	control *http.ServeMux
}

// startHub serves a Hub, the page (with /presenced.js) and the test's
// control endpoints on a loopback port.
func startHub(t *testing.T, cfg transport.Config) *testHub {
	t.Helper()
	hub, err := transport.New(cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/", web.Handler())
	checked := apicheck.Handler(t, hub) // against docs/openapi.yaml
	mux.Handle("/ws", checked)
	mux.Handle("/sse", checked)
	mux.Handle("/sse/", checked)
	mux.Handle("/api/", checked)
	mux.HandleFunc("POST /test/disconnect", func(w http.ResponseWriter, r *http.Request) {
		if err := hub.Disconnect(r.Context(), r.URL.Query().Get("uid")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	h := &testHub{Server: httptest.NewServer(mux), hub: hub, control: mux}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hub.Shutdown(ctx)
		h.Close()
	})
	return h
}

// tcpProxy forwards loopback TCP connections to a server, and can drop
// them all at once: a network failure, seen by both ends as a lost socket.
type tcpProxy struct {
	l     net.Listener
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tcpProxy{l: l, conns: map[net.Conn]struct{}{}}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go p.forward(c, target)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		p.cut()
	})
	return p
}

func (p *tcpProxy) addr() string { return p.l.Addr().String() }

func (p *tcpProxy) forward(c net.Conn, target string) {
	s, err := net.Dial("tcp", target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[s] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(s, c)
	go pipe(c, s)
	<-done
	c.Close()
	s.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}
