package main

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
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testKeyFile is the PEM of testRSA's public key, written once.
var testKeyFile = func() string {
	der, err := x509.MarshalPKIXPublicKey(&testRSA.PublicKey)
	if err != nil {
		panic(err)
	}
	dir, err := os.MkdirTemp("", "presenced-key")
	if err != nil {
		panic(err)
	}
	path := filepath.Join(dir, "key.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		panic(err)
	}
	return path
}()

var testRSA = func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
}()

// dialToken dials /ws of addr with tok and returns the HTTP status, or the
// welcome's uid.
func dialToken(t *testing.T, addr, tok string) (int, string) {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws?token="+tok, nil)
	if err != nil {
		require.NotNil(t, resp, "%v", err)
		return resp.StatusCode, ""
	}
	defer ws.Close()
	var welcome struct{ UID string }
	require.NoError(t, ws.ReadJSON(&welcome))
	return http.StatusSwitchingProtocols, welcome.UID
}

func rsToken(t *testing.T, method jwt.SigningMethod, key any, kid string) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, jwt.MapClaims{"sub": "bob", "exp": time.Now().Add(time.Hour).Unix()})
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

// -jwt-public-key: RS256 tokens of the key are taken, an HS256 token
// signed with the key file's bytes is not.
func TestJWTPublicKeyFlag(t *testing.T) {
	addr, out := startRun(t, []string{"-jwt-public-key", testKeyFile}, nil)
	assert.NotContains(t, out.String(), "demo mode")
	code, uid := dialToken(t, addr, rsToken(t, jwt.SigningMethodRS256, testRSA, ""))
	assert.Equal(t, http.StatusSwitchingProtocols, code)
	assert.Equal(t, "bob", uid)
	pemBytes, err := os.ReadFile(testKeyFile)
	require.NoError(t, err)
	code, _ = dialToken(t, addr, rsToken(t, jwt.SigningMethodHS256, pemBytes, ""))
	assert.Equal(t, http.StatusUnauthorized, code, "alg confusion")
}

// PRESENCED_JWKS_URL: ES256 tokens of a key of the set are taken by kid.
func TestJWKSURLFromEnvironment(t *testing.T) {
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	jwk, err := jwkset.NewJWKFromKey(&ec.PublicKey, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: "e1"}})
	require.NoError(t, err)
	set, err := json.Marshal(jwkset.JWKSMarshal{Keys: []jwkset.JWKMarshal{jwk.Marshal()}})
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(set)
	}))
	defer srv.Close()
	addr, out := startRun(t, nil, map[string]string{"PRESENCED_JWKS_URL": srv.URL + "/.well-known/jwks.json"})
	assert.Contains(t, out.String(), "jwks_url="+srv.URL)
	code, uid := dialToken(t, addr, rsToken(t, jwt.SigningMethodES256, ec, "e1"))
	assert.Equal(t, http.StatusSwitchingProtocols, code)
	assert.Equal(t, "bob", uid)
	code, _ = dialToken(t, addr, rsToken(t, jwt.SigningMethodRS256, testRSA, "e1"))
	assert.Equal(t, http.StatusUnauthorized, code, "an RS256 token naming the EC key")
}
