package transport_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/transport"
)

// corsServer serves a Hub as cmd/presenced does, with a stand-in for the
// JavaScript client at /presenced.js behind Hub.CORS, on a loopback port.
type corsServer struct {
	url, host string
}

const corsAPIKey = "cors-key"

func startCORSServer(t *testing.T, origins ...string) corsServer {
	t.Helper()
	cfg := jwtConfig()
	cfg.Origins = origins
	cfg.APIKey = corsAPIKey
	hub, err := transport.NewManual(cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/presenced.js", hub.CORS(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		io.WriteString(w, "export class Presenced {}\n")
	})))
	mux.Handle("/api/", hub)
	mux.Handle("/ws", hub)
	mux.Handle("/healthz", hub)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		assert.NoError(t, hub.Shutdown(ctx))
		srv.Close()
	})
	return corsServer{url: srv.URL, host: strings.TrimPrefix(srv.URL, "http://")}
}

// corsReply is what a test looks at in an answer.
type corsReply struct {
	status int
	header http.Header
	body   string
}

// do sends method path with the headers given as name, value pairs.
func (s corsServer) do(t *testing.T, method, path string, header ...string) corsReply {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] != "" {
			req.Header.Set(header[i], header[i+1])
		}
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return corsReply{res.StatusCode, res.Header, string(b)}
}

// preflight is a browser's preflight of method on path from origin, for a
// request with an Authorization header.
func (s corsServer) preflight(t *testing.T, path, origin, method string) corsReply {
	t.Helper()
	return s.do(t, http.MethodOptions, path, "Origin", origin,
		"Access-Control-Request-Method", method, "Access-Control-Request-Headers", "authorization")
}

// noCORS asserts that r grants nothing to a page: no Access-Control-* header.
func noCORS(t *testing.T, r corsReply, what string) {
	t.Helper()
	for k := range r.header {
		assert.False(t, strings.HasPrefix(k, "Access-Control-"), "%s: %s: %v", what, k, r.header[k])
	}
}

// allowedFor asserts that a page on origin may read r.
func allowedFor(t *testing.T, r corsReply, origin, what string) {
	t.Helper()
	assert.Equal(t, origin, r.header.Get("Access-Control-Allow-Origin"), what)
	assert.Contains(t, r.header.Values("Vary"), "Origin", what)
	assert.Empty(t, r.header.Get("Access-Control-Allow-Credentials"), "%s: no cookies", what)
}

// jsonRefusal asserts that r is a refusal with status and a JSON error.
func jsonRefusal(t *testing.T, r corsReply, status int, what string) {
	t.Helper()
	assert.Equal(t, status, r.status, "%s: %s", what, r.body)
	assert.Equal(t, "application/json", r.header.Get("Content-Type"), what)
	var e struct{ Error string }
	assert.NoError(t, json.Unmarshal([]byte(r.body), &e), "%s: %s", what, r.body)
	assert.NotEmpty(t, e.Error, "%s: %s", what, r.body)
}

// checkPreflightOK asserts that r lets a page on origin send methods with
// Authorization and Content-Type.
func checkPreflightOK(t *testing.T, r corsReply, origin, methods, what string) {
	t.Helper()
	assert.Equal(t, http.StatusNoContent, r.status, "%s: %s", what, r.body)
	allowedFor(t, r, origin, what)
	assert.Equal(t, methods, r.header.Get("Access-Control-Allow-Methods"), what)
	assert.Equal(t, "Authorization, Content-Type", r.header.Get("Access-Control-Allow-Headers"), what)
	assert.Equal(t, "600", r.header.Get("Access-Control-Max-Age"), what)
	assert.Empty(t, r.body, what)
}

// TestCORS checks the CORS headers of /presenced.js and the HTTP API, and
// the API's preflights, for each kind of origin: the server's own host, an
// allow-list entry (full origin or bare host), "*", one not allowed, and a
// request with no Origin at all.
func TestCORS(t *testing.T) {
	tok := token(t, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()})
	bearer, apikey := "Bearer "+tok, "apikey "+corsAPIKey

	for _, tc := range []struct {
		name    string
		origins []string
		allowed []string // besides the server's own host
		refused []string
	}{
		{"own host only", nil, nil, []string{"https://app.example.com", "http://127.0.0.2:1234", "null"}},
		{"allow-list", []string{"https://app.example.com", "trusted.test:8443"},
			[]string{"https://app.example.com", "https://trusted.test:8443", "http://trusted.test:8443"},
			[]string{"http://app.example.com", "https://app.example.com:8443", "https://trusted.test", "https://evil.test", "null"}},
		{"any", []string{"*"}, []string{"https://app.example.com", "https://evil.test", "http://localhost:5173"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startCORSServer(t, tc.origins...)
			for _, origin := range append([]string{"http://" + s.host}, tc.allowed...) {
				r := s.do(t, "GET", "/presenced.js", "Origin", origin)
				assert.Equal(t, http.StatusOK, r.status, origin)
				allowedFor(t, r, origin, "GET /presenced.js from "+origin)

				checkPreflightOK(t, s.preflight(t, "/api/heartbeat", origin, "POST"), origin, "POST", "preflight heartbeat from "+origin)
				r = s.do(t, "POST", "/api/heartbeat", "Origin", origin, "Authorization", bearer)
				assert.Equal(t, http.StatusNoContent, r.status, "heartbeat from %s: %s", origin, r.body)
				allowedFor(t, r, origin, "heartbeat from "+origin)
				// A refusal is readable too, so the page can tell why.
				r = s.do(t, "POST", "/api/heartbeat", "Origin", origin, "Authorization", "Bearer nope")
				jsonRefusal(t, r, http.StatusUnauthorized, "bad token from "+origin)
				allowedFor(t, r, origin, "bad token from "+origin)

				checkPreflightOK(t, s.preflight(t, "/api/presence/bob", origin, "GET"), origin, "GET, HEAD", "preflight presence from "+origin)
				r = s.do(t, "GET", "/api/presence/bob", "Origin", origin, "Authorization", apikey)
				assert.Equal(t, http.StatusOK, r.status, "presence from %s: %s", origin, r.body)
				allowedFor(t, r, origin, "presence from "+origin)
				r = s.do(t, "GET", "/api/presence/bob", "Origin", origin)
				jsonRefusal(t, r, http.StatusUnauthorized, "presence without the key from "+origin)
				allowedFor(t, r, origin, "presence without the key from "+origin)

				checkPreflightOK(t, s.preflight(t, "/api/publish", origin, "POST"), origin, "POST", "preflight publish from "+origin)
				r = s.do(t, "GET", "/api/ring", "Origin", origin)
				assert.Equal(t, http.StatusOK, r.status, origin)
				allowedFor(t, r, origin, "ring from "+origin)

				// Not a method of the path: the browser must stop.
				r = s.preflight(t, "/api/heartbeat", origin, "DELETE")
				jsonRefusal(t, r, http.StatusMethodNotAllowed, "preflight DELETE heartbeat from "+origin)
				assert.Equal(t, "OPTIONS, POST", r.header.Get("Allow"))
				noCORS(t, r, "preflight DELETE heartbeat from "+origin)
				// Unknown paths and methods are JSON, readable by the page.
				r = s.preflight(t, "/api/nope", origin, "GET")
				jsonRefusal(t, r, http.StatusNotFound, "preflight of an unknown path from "+origin)
				r = s.do(t, "DELETE", "/api/heartbeat", "Origin", origin)
				jsonRefusal(t, r, http.StatusMethodNotAllowed, "DELETE heartbeat from "+origin)
				allowedFor(t, r, origin, "DELETE heartbeat from "+origin)
				assert.Equal(t, "OPTIONS, POST", r.header.Get("Allow"))
			}

			for _, origin := range tc.refused {
				r := s.do(t, "GET", "/presenced.js", "Origin", origin)
				assert.Equal(t, http.StatusOK, r.status, "the browser, not the server, keeps the file from %s", origin)
				noCORS(t, r, "GET /presenced.js from "+origin)
				assert.Contains(t, r.header.Values("Vary"), "Origin", "a cache must not serve it to another origin")

				for _, p := range []struct{ method, path string }{
					{"POST", "/api/heartbeat"}, {"GET", "/api/presence/bob"}, {"POST", "/api/publish"},
					{"POST", "/api/send"}, {"GET", "/api/ring"}, {"GET", "/api/channels/lobby"},
				} {
					what := p.method + " " + p.path + " from " + origin
					r = s.preflight(t, p.path, origin, p.method)
					jsonRefusal(t, r, http.StatusForbidden, "preflight "+what)
					noCORS(t, r, "preflight "+what)
					auth := bearer
					if p.path != "/api/heartbeat" {
						auth = apikey
					}
					// A request sent without a preflight (a form, or a
					// client ignoring CORS) is refused all the same.
					r = s.do(t, p.method, p.path, "Origin", origin, "Authorization", auth)
					jsonRefusal(t, r, http.StatusForbidden, what)
					noCORS(t, r, what)
				}
			}

			// Not from a browser: served as always, with nothing for a page.
			r := s.do(t, "GET", "/presenced.js")
			assert.Equal(t, http.StatusOK, r.status)
			noCORS(t, r, "GET /presenced.js without Origin")
			r = s.do(t, "POST", "/api/heartbeat", "Authorization", bearer)
			assert.Equal(t, http.StatusNoContent, r.status, r.body)
			noCORS(t, r, "heartbeat without Origin")
			r = s.do(t, "GET", "/api/presence/alice", "Authorization", apikey)
			assert.Equal(t, http.StatusOK, r.status, r.body)
			noCORS(t, r, "presence without Origin")
		})
	}
}

// TestOptionsWithoutPreflight: an OPTIONS that is not a preflight (no
// Origin or no Access-Control-Request-Method) says which methods the path
// has; paths outside the API keep refusing OPTIONS in JSON.
func TestOptionsWithoutPreflight(t *testing.T) {
	s := startCORSServer(t, "https://app.example.com")
	for _, tc := range []struct {
		path, origin, allow string
	}{
		{"/api/heartbeat", "", "OPTIONS, POST"},
		{"/api/heartbeat", "https://app.example.com", "OPTIONS, POST"},
		{"/api/presence", "", "GET, HEAD, OPTIONS"},
		{"/api/channels/lobby", "", "GET, HEAD, OPTIONS"},
	} {
		r := s.do(t, "OPTIONS", tc.path, "Origin", tc.origin)
		assert.Equal(t, http.StatusNoContent, r.status, "%s: %s", tc.path, r.body)
		assert.Equal(t, tc.allow, r.header.Get("Allow"), tc.path)
		noCORS(t, r, "OPTIONS "+tc.path)
	}
	for _, path := range []string{"/healthz", "/ws"} {
		r := s.preflight(t, path, "https://app.example.com", "GET")
		jsonRefusal(t, r, http.StatusMethodNotAllowed, "OPTIONS "+path)
		noCORS(t, r, "OPTIONS "+path)
	}
}

// TestCORSAPIHandler: the API mounted alone answers preflights the same way.
func TestCORSAPIHandler(t *testing.T) {
	cfg := jwtConfig()
	cfg.Origins = []string{"https://app.example.com"}
	hub, err := transport.NewManual(cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/api/", hub.APIHandler())
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		assert.NoError(t, hub.Shutdown(ctx))
		srv.Close()
	})
	s := corsServer{url: srv.URL, host: strings.TrimPrefix(srv.URL, "http://")}
	checkPreflightOK(t, s.preflight(t, "/api/heartbeat", "https://app.example.com", "POST"), "https://app.example.com", "POST", "preflight")
	r := s.preflight(t, "/api/heartbeat", "https://evil.test", "POST")
	jsonRefusal(t, r, http.StatusForbidden, "preflight from another origin")
	noCORS(t, r, "preflight from another origin")
	r = s.do(t, "GET", "/api/nope", "Origin", "https://app.example.com")
	jsonRefusal(t, r, http.StatusNotFound, "unknown path")
	allowedFor(t, r, "https://app.example.com", "unknown path")
}
