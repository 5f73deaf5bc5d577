package transport_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/transport"
)

// testKeys are generated once: a 2048-bit RSA key costs a moment under
// -race.
var testKeys = sync.OnceValue(func() (k struct {
	rsa, rsa2 *rsa.PrivateKey
	ec        *ecdsa.PrivateKey
}) {
	var err error
	for _, p := range []**rsa.PrivateKey{&k.rsa, &k.rsa2} {
		if *p, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
	}
	if k.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		panic(err)
	}
	return k
})

// jwksServer serves a JSON Web Key Set the test changes, over loopback.
type jwksServer struct {
	*httptest.Server
	mu    sync.Mutex
	keys  map[string]any // kid: public key
	down  bool           // answer 503
	body  string         // if set, served instead of the keys
	fetch atomic.Int32
}

func startJWKS(t *testing.T, keys map[string]any) *jwksServer {
	s := &jwksServer{keys: keys}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetch.Add(1)
		w.Header().Set("Content-Type", "application/json")
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.down {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		if s.body != "" {
			w.Write([]byte(s.body))
			return
		}
		var set jwkset.JWKSMarshal
		for kid, key := range s.keys {
			jwk, err := jwkset.NewJWKFromKey(key, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid}})
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			set.Keys = append(set.Keys, jwk.Marshal())
		}
		json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(s.Close)
	return s
}

// url is the set's; not "/", which docs/openapi.yaml describes.
func (s *jwksServer) url() string { return s.URL + "/.well-known/jwks.json" }

func (s *jwksServer) set(f func(s *jwksServer)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// kidToken signs claims with key under the header kid ("": none).
func kidToken(t *testing.T, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

func alice() jwt.MapClaims {
	return jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}
}

// publicPEM is the PEM of a public key, as a -jwt-public-key file holds.
func publicPEM(t *testing.T, key any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func newJWKSAuth(t *testing.T, cfg transport.JWTConfig) transport.SessionAuthenticator {
	t.Helper()
	auth, stop, err := transport.NewJWTAuth(cfg)
	require.NoError(t, err)
	t.Cleanup(stop)
	return auth
}

// Tokens are checked against the keys of a JWKS: by kid, with the
// algorithm the key's type allows and no other.
func TestJWKSAuth(t *testing.T) {
	k := testKeys()
	srv := startJWKS(t, map[string]any{"r1": &k.rsa.PublicKey, "e1": &k.ec.PublicKey})
	auth := newJWKSAuth(t, transport.JWTConfig{JWKSURL: srv.url(), JWKSUnknownKID: time.Hour})
	require.EqualValues(t, 1, srv.fetch.Load(), "fetched at start")
	expired := jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(-time.Minute).Unix()}
	for _, tc := range []struct {
		name  string
		token string
		ok    bool
	}{
		{"RS256", kidToken(t, jwt.SigningMethodRS256, k.rsa, "r1", alice()), true},
		{"ES256", kidToken(t, jwt.SigningMethodES256, k.ec, "e1", alice()), true},
		{"ES256 without kid", kidToken(t, jwt.SigningMethodES256, k.ec, "", alice()), true},
		{"RS256 without kid", kidToken(t, jwt.SigningMethodRS256, k.rsa, "", alice()), true},
		{"expired", kidToken(t, jwt.SigningMethodRS256, k.rsa, "r1", expired), false},
		{"no exp", kidToken(t, jwt.SigningMethodRS256, k.rsa, "r1", jwt.MapClaims{"sub": "alice"}), false},
		{"signed by a key not in the set", kidToken(t, jwt.SigningMethodRS256, k.rsa2, "r1", alice()), false},
		{"alg none", kidToken(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "r1", alice()), false},
		// The classic confusion: the RSA public key, which anyone may
		// have, used as an HMAC secret.
		{"HS256 with the RSA public key's PEM", kidToken(t, jwt.SigningMethodHS256, publicPEM(t, &k.rsa.PublicKey), "r1", alice()), false},
		{"HS256 with the RSA public key's DER", kidToken(t, jwt.SigningMethodHS256, x509.MarshalPKCS1PublicKey(&k.rsa.PublicKey), "r1", alice()), false},
		{"HS256 without kid", kidToken(t, jwt.SigningMethodHS256, publicPEM(t, &k.rsa.PublicKey), "", alice()), false},
		{"ES256 naming the RSA key", kidToken(t, jwt.SigningMethodES256, k.ec, "r1", alice()), false},
		{"RS256 naming the EC key", kidToken(t, jwt.SigningMethodRS256, k.rsa, "e1", alice()), false},
		{"PS256 is refused", kidToken(t, jwt.SigningMethodPS256, k.rsa, "r1", alice()), false},
		{"RS512 is refused", kidToken(t, jwt.SigningMethodRS512, k.rsa, "r1", alice()), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := auth.Refresh(tc.token)
			if tc.ok {
				require.NoError(t, err)
				assert.Equal(t, "alice", s.UID)
				return
			}
			assert.ErrorIs(t, err, transport.ErrUnauthenticated)
		})
	}
	assert.EqualValues(t, 1, srv.fetch.Load(), "no token above named an unknown kid")

	// A kid the set lacks costs one fetch; another within JWKSUnknownKID
	// costs none, so made-up kids cannot hammer the key server.
	_, err := auth.Refresh(kidToken(t, jwt.SigningMethodRS256, k.rsa2, "nope", alice()))
	assert.ErrorIs(t, err, transport.ErrUnauthenticated, "unknown after a fetch")
	assert.EqualValues(t, 2, srv.fetch.Load(), "fetched again for the unknown kid")
	for range 5 {
		_, err = auth.Refresh(kidToken(t, jwt.SigningMethodRS256, k.rsa2, "nope2", alice()))
		assert.ErrorIs(t, err, transport.ErrUnauthenticated)
	}
	assert.EqualValues(t, 2, srv.fetch.Load(), "rate limited")
}

// A key that appears in the set is fetched the first time a token names
// it; one that leaves it is refused after the next fetch.
func TestJWKSKeyRotation(t *testing.T) {
	k := testKeys()
	srv := startJWKS(t, map[string]any{"r1": &k.rsa.PublicKey})
	auth := newJWKSAuth(t, transport.JWTConfig{JWKSURL: srv.url(), JWKSUnknownKID: time.Millisecond})
	_, err := auth.Refresh(kidToken(t, jwt.SigningMethodRS256, k.rsa, "r1", alice()))
	require.NoError(t, err)

	srv.set(func(s *jwksServer) { s.keys = map[string]any{"r2": &k.rsa2.PublicKey, "e2": &k.ec.PublicKey} })
	for _, tok := range []string{
		kidToken(t, jwt.SigningMethodRS256, k.rsa2, "r2", alice()),
		kidToken(t, jwt.SigningMethodES256, k.ec, "e2", alice()),
	} {
		// Eventually: a fetch may be one millisecond too soon after the last.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			s, err := auth.Refresh(tok)
			if assert.NoError(c, err) {
				assert.Equal(c, "alice", s.UID)
			}
		}, waitLong, 10*time.Millisecond)
	}
	_, err = auth.Refresh(kidToken(t, jwt.SigningMethodRS256, k.rsa, "r1", alice()))
	assert.ErrorIs(t, err, transport.ErrUnauthenticated, "r1 left the set at the last fetch")
}

// A key server down at start leaves the server up, refusing tokens until
// the key server answers.
func TestJWKSDownAtStart(t *testing.T) {
	k := testKeys()
	srv := startJWKS(t, map[string]any{"r1": &k.rsa.PublicKey})
	srv.set(func(s *jwksServer) { s.down = true })
	auth := newJWKSAuth(t, transport.JWTConfig{JWKSURL: srv.url(), JWKSUnknownKID: time.Millisecond})
	tok := kidToken(t, jwt.SigningMethodRS256, k.rsa, "r1", alice())
	_, err := auth.Refresh(tok)
	assert.ErrorIs(t, err, transport.ErrUnauthenticated)

	srv.set(func(s *jwksServer) { s.down = false })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := auth.Refresh(tok)
		assert.NoError(c, err)
	}, waitLong, 10*time.Millisecond)
}

// A JWKS over 256 KiB is not read.
func TestJWKSBodyIsBounded(t *testing.T) {
	k := testKeys()
	srv := startJWKS(t, nil)
	jwk, err := jwkset.NewJWKFromKey(&k.rsa.PublicKey, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: "r1"}})
	require.NoError(t, err)
	one, err := json.Marshal(jwk.Marshal())
	require.NoError(t, err)
	// Valid but for its size: r1 comes first, then padding a JWKS reader
	// ignores.
	srv.body = `{"keys":[` + string(one) + `],"pad":"` + strings.Repeat("x", 256<<10) + `"}`
	require.Greater(t, len(srv.body), 256<<10)
	auth := newJWKSAuth(t, transport.JWTConfig{JWKSURL: srv.url(), JWKSUnknownKID: time.Hour})
	_, err = auth.Refresh(kidToken(t, jwt.SigningMethodRS256, k.rsa, "r1", alice()))
	assert.ErrorIs(t, err, transport.ErrUnauthenticated)
}
