package transport_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/transport"
)

var jwtSecret = []byte("test-secret")

func signed(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	require.NoError(t, err)
	return s
}

func TestJWTAuth(t *testing.T) {
	cfg := testConfig()
	cfg.Auth = transport.JWTAuth(jwtSecret)
	s := startServer(t, cfg)
	future := time.Now().Add(time.Hour).Unix()
	good := signed(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"sub": "alice", "exp": future})
	for _, tc := range []struct {
		name   string
		query  string
		header string
		want   int // 0: upgraded
	}{
		{"query token", "token=" + good, "", 0},
		{"bearer header", "", "Bearer " + good, 0},
		{"lower-case bearer", "", "bearer " + good, 0},
		{"header wins over ?uid=", "uid=mallory", "Bearer " + good, 0},
		{"no token", "", "", 401},
		{"demo uid is ignored", "uid=alice", "", 401},
		{"garbage", "token=not.a.jwt", "", 401},
		{"garbage header", "", "Bearer xyz", 401},
		{"basic auth", "", "Basic YWxpY2U6cHc=", 401},
		{"wrong secret", "token=" + signed(t, jwt.SigningMethodHS256, []byte("other"), jwt.MapClaims{"sub": "alice", "exp": future}), "", 401},
		{"expired", "token=" + signed(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(-time.Minute).Unix()}), "", 401},
		{"not yet valid", "token=" + signed(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"sub": "alice", "nbf": future}), "", 401},
		{"HS512 is refused", "token=" + signed(t, jwt.SigningMethodHS512, jwtSecret, jwt.MapClaims{"sub": "alice", "exp": future}), "", 401},
		{"alg none is refused", "token=" + signed(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"sub": "alice"}), "", 401},
		{"no sub", "token=" + signed(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"exp": future}), "", 401},
		{"sub not a user ID", "token=" + signed(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"sub": "al ice", "exp": future}), "", 400},
		{"channels null", "token=" + signed(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"sub": "alice", "exp": future, "channels": nil}), "", 401},
		{"channels a string", "token=" + signed(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"sub": "alice", "exp": future, "channels": "lobby"}), "", 401},
		{"watch null", "token=" + signed(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"sub": "alice", "exp": future, "watch": nil}), "", 401},
		{"watch of numbers", "token=" + signed(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"sub": "alice", "exp": future, "watch": []int{1}}), "", 401},
		{"exp a numeric string", "token=" + signed(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"sub": "alice", "exp": strconv.FormatInt(future, 10)}), "", 401},
		{"nbf a numeric string", "token=" + signed(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"sub": "alice", "exp": future, "nbf": "1"}), "", 401},
		{"iat a numeric string", "token=" + signed(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"sub": "alice", "exp": future, "iat": "1"}), "", 401},
		{"empty claims", "token=" + signed(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"sub": "alice", "exp": future, "channels": []string{}, "watch": []string{}}), "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.header != "" {
				h.Set("Authorization", tc.header)
			}
			if tc.want != 0 {
				assert.Equal(t, tc.want, s.dialStatus(t, tc.query, h), "upgrade")
				assert.Equal(t, tc.want, s.heartbeat(t, tc.query, h), "heartbeat")
				return
			}
			ws := s.dialRaw(t, tc.query, h)
			w := readFrame(t, ws)
			assert.Equal(t, "welcome", w["type"])
			assert.Equal(t, "alice", w["uid"], "the user ID is the token's sub")
			assert.Equal(t, http.StatusNoContent, s.heartbeat(t, tc.query, h))
		})
	}
}

// Once a token's exp has passed, authenticating with it fails: a heartbeat
// or a new socket is refused with 401. (A socket opened before exp is closed
// with 4401 at exp: TestTokenExpiryClosesWith4401.)
func TestExpiredTokenIsRefusedAtAuthentication(t *testing.T) {
	cfg := testConfig()
	cfg.Auth = transport.JWTAuth(jwtSecret)
	s := startServer(t, cfg)
	tok := signed(t, jwt.SigningMethodHS256, jwtSecret, jwt.MapClaims{"sub": "bob", "exp": time.Now().Add(1100 * time.Millisecond).Unix()})
	ws := s.dialRaw(t, "token="+tok, nil)
	require.Equal(t, "welcome", readFrame(t, ws)["type"])
	require.Eventually(t, func() bool { return s.heartbeat(t, "token="+tok, nil) == http.StatusUnauthorized }, waitLong, 50*time.Millisecond)
	assert.Equal(t, http.StatusUnauthorized, s.dialStatus(t, "token="+tok, nil))
}

func TestCustomAuthenticator(t *testing.T) {
	cfg := testConfig()
	cfg.Auth = transport.AuthenticatorFunc(func(r *http.Request) (string, error) {
		switch key := r.Header.Get("X-Api-Key"); key {
		case "k1":
			return "svc-1", nil
		case "bad-id":
			return "not valid!", nil // the Hub validates what it is given
		default:
			return "", transport.ErrUnauthenticated
		}
	})
	s := startServer(t, cfg)
	ws := s.dialRaw(t, "", http.Header{"X-Api-Key": {"k1"}})
	assert.Equal(t, "svc-1", readFrame(t, ws)["uid"])
	assert.Equal(t, http.StatusBadRequest, s.dialStatus(t, "", http.Header{"X-Api-Key": {"bad-id"}}))
	assert.Equal(t, http.StatusUnauthorized, s.dialStatus(t, "", http.Header{"X-Api-Key": {"nope"}}))
}

// Refusals happen before the upgrade: a plain HTTP request sees the status
// and a JSON error body.
func TestRefusalIsPlainHTTP(t *testing.T) {
	cfg := testConfig()
	cfg.Auth = transport.JWTAuth(jwtSecret)
	hub, err := transport.New(cfg)
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	hub.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ws?token=bad", nil))
	assert.Equal(t, http.StatusUnauthorized, rec.Code)
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	assert.Contains(t, rec.Body.String(), `"error"`)
	require.NoError(t, hub.Shutdown(t.Context()))
}
