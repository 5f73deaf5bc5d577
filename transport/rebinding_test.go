package transport_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/transport"
)

// request sends method path to s with the given Host and Origin (either
// may be empty) and returns the status, the echoed origin and the body.
func (s *testServer) request(t *testing.T, method, path, host, origin string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.srv.URL+path, nil)
	require.NoError(t, err)
	if host != "" {
		req.Host = host
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"), string(body)
}

// wsStatus dials /ws with the given Host and Origin and returns the
// handshake's status.
func (s *testServer) wsStatus(t *testing.T, query, host, origin string) int {
	t.Helper()
	h := http.Header{}
	if host != "" {
		h.Set("Host", host)
	}
	if origin != "" {
		h.Set("Origin", origin)
	}
	ws, resp, err := websocket.DefaultDialer.Dial(s.wsURL(query), h)
	if ws != nil {
		ws.Close()
		return http.StatusSwitchingProtocols
	}
	require.ErrorIs(t, err, websocket.ErrBadHandshake)
	resp.Body.Close()
	return resp.StatusCode
}

// A page on a web site whose name the attacker points at 127.0.0.1 (DNS
// rebinding) reaches a demo server on the visitor's machine as its own
// host: same Host and Origin. The server answers only localhost names, IP
// addresses and the hosts it was given, so the page gets 403 on the API,
// the heartbeat and the socket; the health checks answer any name.
func TestDemoModeRefusesForeignHosts(t *testing.T) {
	s := startServer(t, testConfig())
	port := s.srv.URL[strings.LastIndex(s.srv.URL, ":")+1:]
	foreign := "rebind.attacker.test:" + port
	origin := "http://" + foreign

	status, echoed, body := s.request(t, "GET", "/api/presence", foreign, origin)
	assert.Equal(t, http.StatusForbidden, status)
	assert.Empty(t, echoed, "no CORS for a foreign host")
	assert.Contains(t, body, `"error":"host not allowed`)
	status, _, _ = s.request(t, "POST", "/api/heartbeat?uid=mallory", foreign, origin)
	assert.Equal(t, http.StatusForbidden, status, "heartbeat")
	assert.Equal(t, http.StatusForbidden, s.wsStatus(t, "uid=mallory", foreign, origin), "the socket")
	status, _, _ = s.request(t, "GET", "/healthz", foreign, "")
	assert.Equal(t, http.StatusOK, status, "health answers any name")

	for _, host := range []string{"localhost:" + port, "LOCALHOST:" + port, "app.localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port} {
		status, _, _ := s.request(t, "GET", "/api/presence", host, "")
		assert.Equal(t, http.StatusOK, status, host)
	}
	status, _, _ = s.request(t, "GET", "/api/presence", "localhost.:"+port, "")
	assert.Equal(t, http.StatusForbidden, status, "a trailing dot is another name")
	assert.Equal(t, http.StatusSwitchingProtocols, s.wsStatus(t, "uid=alice", "localhost:"+port, "http://localhost:"+port))
}

// Hosts names the servers' own names; with authentication on, the check
// is on only when Hosts is set.
func TestHostsAllowList(t *testing.T) {
	cfg := testConfig()
	cfg.Hosts = []string{"chat.example.com"}
	cfg.Origins = []string{"https://app.example.com"}
	s := startServer(t, cfg)
	for host, want := range map[string]int{
		"chat.example.com":      http.StatusOK,
		"chat.example.com:8443": http.StatusOK,
		"app.example.com":       http.StatusOK, // a host of Origins
		"evil.example.com":      http.StatusForbidden,
	} {
		status, _, _ := s.request(t, "GET", "/api/presence", host, "")
		assert.Equal(t, want, status, host)
	}

	authed := testConfig()
	authed.Auth = transport.JWTAuth(jwtSecret)
	authed.APIKey = "k"
	a := startServer(t, authed)
	status, _, _ := a.request(t, "GET", "/api/ring", "any.example.com", "")
	assert.Equal(t, http.StatusOK, status, "with authentication and no Hosts, any name")
	authed.Hosts = []string{"chat.example.com"}
	b := startServer(t, authed)
	status, _, _ = b.request(t, "GET", "/api/ring", "any.example.com", "")
	assert.Equal(t, http.StatusForbidden, status, "with Hosts set, only those")

	for _, bad := range []string{"https://chat.example.com", "chat.example.com/x", "a b", ""} {
		c := testConfig()
		c.Hosts = []string{bad}
		_, err := transport.New(c)
		assert.Error(t, err, "%q", bad)
	}
}

// An Origin is exactly scheme://host[:port]: anything else is refused like
// a foreign origin, and Access-Control-Allow-Origin only ever echoes the
// allowed origin itself.
func TestOriginsAreOrigins(t *testing.T) {
	cfg := testConfig()
	cfg.Origins = []string{"https://app.example.com"}
	s := startServer(t, cfg)
	for _, origin := range []string{
		"https://app.example.com/",
		"https://app.example.com/x?y#z",
		"https://user@app.example.com",
		"https://user:pw@app.example.com",
		"https://app.example.com.",
		"https://app.example.com:0",
		"https://app.example.com#",
		"app.example.com",
	} {
		status, echoed, _ := s.request(t, "GET", "/api/presence", "", origin)
		assert.Equal(t, http.StatusForbidden, status, "%q on the API", origin)
		assert.Empty(t, echoed, "%q echoed", origin)
		assert.Equal(t, http.StatusForbidden, s.wsStatus(t, "uid=alice", "", origin), "%q on the socket", origin)
	}
	for _, origin := range []string{"https://app.example.com", "HTTPS://APP.EXAMPLE.COM"} {
		status, echoed, _ := s.request(t, "GET", "/api/presence", "", origin)
		assert.Equal(t, http.StatusOK, status, origin)
		assert.Equal(t, "https://app.example.com", echoed, "%q: the allowed origin is echoed", origin)
	}
}
