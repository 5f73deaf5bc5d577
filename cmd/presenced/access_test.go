package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/presencedtest"
	"github.com/presenced/presenced/internal/ssetest"
)

// accessRow is a row of protocol.md's table of who may ask what: a path,
// whether it answers any Host, and what it needs in each mode.
type accessRow struct {
	path  string
	host  string   // checked or any
	needs []string // open, user, key or off; by the columns of accessModes
}

// accessModes are the table's columns after Host, as servers: demo, demo
// with a key, token mode, token mode with a key. The token modes set
// -hosts, which turns their Host check on.
var accessModes = []struct {
	name string
	args []string
}{
	{"demo", nil},
	{"demo, -api-key", []string{"-api-key", accessKey}},
	{"-jwt-secret", []string{"-jwt-secret", accessSecret, "-hosts", "chat.example"}},
	{"-jwt-secret, -api-key", []string{"-jwt-secret", accessSecret, "-api-key", accessKey, "-hosts", "chat.example"}},
}

const accessKey, accessSecret = "k-123", "s3cret"

// accessTable reads the table from docs/protocol.md: the test walks what
// the document says.
func accessTable(t *testing.T) []accessRow {
	t.Helper()
	raw, err := os.ReadFile("../../docs/protocol.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(raw), "\n### Who may ask what\n")
	require.True(t, ok, "protocol.md has no section Who may ask what")
	var rows []accessRow
	for line := range strings.SplitSeq(rest, "\n") {
		if !strings.HasPrefix(line, "|") {
			if len(rows) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if cells[0] == "path" {
			require.Equal(t, len(accessModes), len(cells)-2, "columns: %q", line)
			for i, m := range accessModes {
				assert.Equal(t, m.name, strings.ReplaceAll(cells[i+2], "`", ""), "column %d", i+2)
			}
			continue
		}
		if strings.HasPrefix(cells[0], "---") {
			continue
		}
		require.Len(t, cells, 2+len(accessModes), "row %q", line)
		rows = append(rows, accessRow{path: cells[0], host: cells[1], needs: cells[2:]})
	}
	require.NotEmpty(t, rows)
	return rows
}

// An ask is one request of a path: the Host it names ("" for the
// server's address), its Authorization, and whether it names a user.
type ask struct {
	host, auth string
	user       bool
}

// accessServer is a server of one mode, asked of its paths.
type accessServer struct {
	addr  string
	token string // a user's, in token mode
}

// identity is the query that names a user in the server's mode.
func (s accessServer) identity(a ask) string {
	switch {
	case !a.user:
		return ""
	case s.token != "":
		return "token=" + s.token
	}
	return "uid=alice"
}

// http asks method path of s and returns the status and body.
func (s accessServer) http(t *testing.T, method, path, body string, a ask) (int, string) {
	t.Helper()
	if q := s.identity(a); q != "" {
		path += "?" + q
	}
	req, err := http.NewRequest(method, "http://"+s.addr+path, strings.NewReader(body))
	require.NoError(t, err)
	if a.host != "" {
		req.Host = a.host
	}
	if a.auth != "" {
		req.Header.Set("Authorization", a.auth)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

// A probe asks a row's path and says whether it got what the path serves,
// with the status.
type probe func(t *testing.T, s accessServer, a ask) (granted bool, status int, body string)

func status(method, path, body string, want int) probe {
	return func(t *testing.T, s accessServer, a ask) (bool, int, string) {
		code, b := s.http(t, method, path, body, a)
		return code == want, code, b
	}
}

// accessProbes are the table's paths as the test asks them.
var accessProbes = map[string]probe{
	"`GET /ws`": func(t *testing.T, s accessServer, a ask) (bool, int, string) {
		h := http.Header{}
		if a.host != "" {
			h.Set("Host", a.host)
		}
		if a.auth != "" {
			h.Set("Authorization", a.auth)
		}
		ws, res, err := websocket.DefaultDialer.Dial("ws://"+s.addr+"/ws?"+s.identity(a), h)
		if err == nil {
			ws.Close()
			return true, http.StatusSwitchingProtocols, ""
		}
		require.ErrorIs(t, err, websocket.ErrBadHandshake)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return false, res.StatusCode, string(b)
	},
	"`POST /api/heartbeat`": status("POST", "/api/heartbeat", "", http.StatusNoContent),
	"`GET /sse`": func(t *testing.T, s accessServer, a ask) (bool, int, string) {
		req, err := http.NewRequest(http.MethodGet, "http://"+s.addr+"/sse?"+s.identity(a), nil)
		require.NoError(t, err)
		if a.host != "" {
			req.Host = a.host
		}
		if a.auth != "" {
			req.Header.Set("Authorization", a.auth)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		if res.StatusCode == http.StatusOK {
			return true, res.StatusCode, "" // a stream: it lasts
		}
		b, _ := io.ReadAll(res.Body)
		return false, res.StatusCode, string(b)
	},
	// With a user the probe opens a stream first, on the server's own
	// Host, and posts to its session; without, to a session of nobody.
	"`POST /sse/{session}`": func(t *testing.T, s accessServer, a ask) (bool, int, string) {
		session := strings.Repeat("A", 22)
		if a.user {
			st, err := ssetest.Open("http://"+s.addr, s.identity(a), nil)
			require.NoError(t, err)
			defer st.Close()
			session = st.Session
		}
		req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+"/sse/"+session, strings.NewReader(`{"type":"ping"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "text/plain")
		if a.host != "" {
			req.Host = a.host
		}
		if a.auth != "" {
			req.Header.Set("Authorization", a.auth)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode == http.StatusNoContent, res.StatusCode, string(b)
	},
	"`GET /api/ring`": status("GET", "/api/ring", "", http.StatusOK),
	"`GET /api/ring`, its `due`": func(t *testing.T, s accessServer, a ask) (bool, int, string) {
		code, b := s.http(t, "GET", "/api/ring", "", a)
		return code == http.StatusOK && strings.Contains(b, `"due":[`), code, b
	},
	"`GET /api/presence`":           status("GET", "/api/presence", "", http.StatusOK),
	"`GET /api/presence/{uid}`":     status("GET", "/api/presence/alice", "", http.StatusOK),
	"`GET /api/events`":             status("GET", "/api/events", "", http.StatusOK),
	"`GET /api/channels/{channel}`": status("GET", "/api/channels/lobby", "", http.StatusOK),
	"`POST /api/publish`":           status("POST", "/api/publish", `{"channel":"lobby","data":{"n":1}}`, http.StatusNoContent),
	"`POST /api/send`":              status("POST", "/api/send", `{"uid":"alice","data":{"n":1}}`, http.StatusNoContent),
	"`POST /api/disconnect`":        status("POST", "/api/disconnect", `{"uid":"mallory"}`, http.StatusNoContent),
	"`GET /metrics`":                status("GET", "/metrics", "", http.StatusOK),
	"`GET /healthz`":                status("GET", "/healthz", "", http.StatusOK),
	"`GET /readyz`":                 status("GET", "/readyz", "", http.StatusOK),
	"`GET /openapi.yaml`":           status("GET", "/openapi.yaml", "", http.StatusOK),
	"`GET /schema/{name}.json`":     status("GET", "/schema/server-frames.json", "", http.StatusOK),
	"`GET /presenced.js`":           status("GET", "/presenced.js", "", http.StatusOK),
	"`GET /`":                       status("GET", "/", "", http.StatusOK),
}

// TestWhoMayAskWhat walks protocol.md's table of who may ask what against
// a real server in each mode: every path with and without the key, a
// wrong key, a user's identity, and a Host the server does not know.
func TestWhoMayAskWhat(t *testing.T) {
	rows := accessTable(t)
	seen := map[string]bool{}
	for _, r := range rows {
		require.Contains(t, accessProbes, r.path, "a row the test cannot ask")
		seen[r.path] = true
	}
	for path := range accessProbes {
		assert.True(t, seen[path], "protocol.md's table has no row %s", path)
	}
	for col, m := range accessModes {
		t.Run(m.name, func(t *testing.T) {
			addr, _ := startRun(t, m.args, nil)
			s := accessServer{addr: addr}
			if strings.Contains(m.name, "jwt") {
				tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(accessSecret))
				require.NoError(t, err)
				s.token = tok
			}
			for _, r := range rows {
				ask1 := accessProbes[r.path]
				need := r.needs[col]
				check := func(a ask, want bool, status ...int) {
					granted, code, body := ask1(t, s, a)
					assert.Equal(t, want, granted, "%s %s, %+v: %d %s", need, r.path, a, code, body)
					if len(status) > 0 && !strings.Contains(r.path, "`due`") {
						assert.Equal(t, status[0], code, "%s %s, %+v: %s", need, r.path, a, body)
					}
				}
				switch need {
				case "open":
					check(ask{}, true)
				case "user":
					check(ask{user: true}, true)
					granted, code, body := ask1(t, s, ask{})
					assert.False(t, granted, "%s without a user: %d %s", r.path, code, body)
					assert.Contains(t, []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusUpgradeRequired}, code, "%s without a user: %s", r.path, body)
				case "session":
					check(ask{user: true}, true)
					check(ask{}, false, http.StatusNotFound)
				case "key":
					check(ask{}, false, http.StatusUnauthorized)
					check(ask{auth: "apikey wrong"}, false, http.StatusUnauthorized)
					check(ask{auth: "apikey " + accessKey}, true)
				case "off":
					check(ask{}, false, http.StatusForbidden)
					check(ask{auth: "apikey " + accessKey}, false, http.StatusForbidden)
				default:
					t.Errorf("%s: %q is not open, user, session, key or off", r.path, need)
				}
				// A Host the server does not know: refused before anything
				// else, the key and the user notwithstanding, but by the
				// health checks.
				foreign := ask{host: "evil.test", user: true, auth: "apikey " + accessKey}
				granted, code, body := ask1(t, s, foreign)
				switch r.host {
				case "checked":
					assert.False(t, granted, "%s for Host evil.test", r.path)
					assert.Equal(t, http.StatusForbidden, code, "%s for Host evil.test: %s", r.path, body)
					assert.Contains(t, body, "host not allowed", r.path)
				case "any":
					assert.True(t, granted, "%s for Host evil.test: %d %s", r.path, code, body)
				default:
					t.Errorf("%s: Host %q is not checked or any", r.path, r.host)
				}
			}
		})
	}
}

// Anyone may ask /readyz, so with Redis unreachable it says what is
// wrong but not where: no address, no port.
func TestReadyzNamesNoAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	redisAddr := l.Addr().String()
	l.Close() // nothing listens there now
	// The binary: with Redis gone its shutdown fails, which startRun
	// would take for a failure of the test.
	addr := presencedtest.Start(t, presencedtest.Build(t), "-redis", "redis://"+redisAddr).Addr
	_, port, err := net.SplitHostPort(redisAddr)
	require.NoError(t, err)
	var body string
	require.Eventually(t, func() bool {
		var code int
		code, body = get(t, "http://"+addr+"/readyz")
		return code == http.StatusServiceUnavailable
	}, waitLong, 10*time.Millisecond)
	assert.Contains(t, body, "connection refused", "what is wrong")
	assert.NotContains(t, body, "127.0.0.1")
	assert.NotContains(t, body, ":"+port)
}
