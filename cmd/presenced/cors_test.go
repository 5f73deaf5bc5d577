package main

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCORSFromOrigins: with -origins, the server hands /presenced.js and
// the answers of its API to pages on those origins, and answers their
// preflights; pages elsewhere get no CORS headers and their API calls 403.
func TestCORSFromOrigins(t *testing.T) {
	const secret, page, other = "cors-secret", "http://127.0.0.1:5173", "http://127.0.0.1:5174"
	addr, _ := startRun(t, []string{"-jwt-secret", secret, "-origins", page}, nil)
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(secret))
	require.NoError(t, err)
	call := func(method, path, origin string, header ...string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, nil)
		require.NoError(t, err)
		req.Header.Set("Origin", origin)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}

	res := call("GET", "/presenced.js", page)
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "text/javascript; charset=utf-8", res.Header.Get("Content-Type"))
	assert.Equal(t, page, res.Header.Get("Access-Control-Allow-Origin"))
	assert.Contains(t, res.Header.Values("Vary"), "Origin")
	res = call("GET", "/presenced.js", other)
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Empty(t, res.Header.Get("Access-Control-Allow-Origin"))
	assert.Contains(t, res.Header.Values("Vary"), "Origin")
	// The page itself stays same-origin only.
	res = call("GET", "/app.js", page)
	assert.Empty(t, res.Header.Get("Access-Control-Allow-Origin"))

	res = call("OPTIONS", "/api/heartbeat", page, "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization")
	assert.Equal(t, http.StatusNoContent, res.StatusCode)
	assert.Equal(t, page, res.Header.Get("Access-Control-Allow-Origin"))
	assert.Equal(t, "POST", res.Header.Get("Access-Control-Allow-Methods"))
	assert.Equal(t, "Authorization, Content-Type", res.Header.Get("Access-Control-Allow-Headers"))
	assert.NotEmpty(t, res.Header.Get("Access-Control-Max-Age"))
	res = call("POST", "/api/heartbeat", page, "Authorization", "Bearer "+tok)
	assert.Equal(t, http.StatusNoContent, res.StatusCode)
	assert.Equal(t, page, res.Header.Get("Access-Control-Allow-Origin"))

	res = call("OPTIONS", "/api/heartbeat", other, "Access-Control-Request-Method", "POST")
	assert.Equal(t, http.StatusForbidden, res.StatusCode)
	assert.Equal(t, "application/json", res.Header.Get("Content-Type"))
	assert.Empty(t, res.Header.Get("Access-Control-Allow-Origin"))
	assert.Empty(t, res.Header.Get("Access-Control-Allow-Methods"))
	res = call("POST", "/api/heartbeat", other, "Authorization", "Bearer "+tok)
	assert.Equal(t, http.StatusForbidden, res.StatusCode)
	assert.Empty(t, res.Header.Get("Access-Control-Allow-Origin"))
}
