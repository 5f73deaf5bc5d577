package transport_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/transport"
)

// writeFile writes data to a file of the test's and returns its path.
func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

// A Hub with Config.JWT verifies RS256 and ES256 tokens, over WebSockets
// and heartbeats alike, with a key file or a JWKS.
func TestHubVerifiesTokensOfConfigJWT(t *testing.T) {
	k := testKeys()
	srv := startJWKS(t, map[string]any{"r1": &k.rsa.PublicKey, "e1": &k.ec.PublicKey})
	expired := jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(-time.Minute).Unix()}
	rsaPEM := publicPEM(t, &k.rsa.PublicKey)
	for _, tc := range []struct {
		name string
		jwt  transport.JWTConfig
		good string
		bad  map[string]string
	}{
		{"RSA key file", transport.JWTConfig{PublicKeyFile: writeFile(t, "rsa.pem", rsaPEM)},
			kidToken(t, jwt.SigningMethodRS256, k.rsa, "", alice()), map[string]string{
				"HS256 with the public key": kidToken(t, jwt.SigningMethodHS256, rsaPEM, "", alice()),
				"ES256":                     kidToken(t, jwt.SigningMethodES256, k.ec, "", alice()),
				"other RSA key":             kidToken(t, jwt.SigningMethodRS256, k.rsa2, "", alice()),
				"expired":                   kidToken(t, jwt.SigningMethodRS256, k.rsa, "", expired),
				"alg none":                  kidToken(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", alice()),
			}},
		{"EC key file", transport.JWTConfig{PublicKeyFile: writeFile(t, "ec.pem", publicPEM(t, &k.ec.PublicKey))},
			kidToken(t, jwt.SigningMethodES256, k.ec, "", alice()), map[string]string{
				"HS256 with the public key": kidToken(t, jwt.SigningMethodHS256, publicPEM(t, &k.ec.PublicKey), "", alice()),
				"RS256":                     kidToken(t, jwt.SigningMethodRS256, k.rsa, "", alice()),
				"expired":                   kidToken(t, jwt.SigningMethodES256, k.ec, "", expired),
			}},
		{"JWKS", transport.JWTConfig{JWKSURL: srv.url()},
			kidToken(t, jwt.SigningMethodES256, k.ec, "e1", alice()), map[string]string{
				"HS256 with the public key": kidToken(t, jwt.SigningMethodHS256, rsaPEM, "r1", alice()),
				"unknown kid":               kidToken(t, jwt.SigningMethodRS256, k.rsa2, "r9", alice()),
				"expired":                   kidToken(t, jwt.SigningMethodRS256, k.rsa, "r1", expired),
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.JWT = tc.jwt
			s := startServer(t, cfg)
			ws := s.dialRaw(t, "token="+tc.good, nil)
			assert.Equal(t, "alice", readFrame(t, ws)["uid"])
			h := http.Header{"Authorization": {"Bearer " + tc.good}}
			assert.Equal(t, http.StatusNoContent, s.heartbeat(t, "", h))
			for name, tok := range tc.bad {
				assert.Equal(t, http.StatusUnauthorized, s.dialStatus(t, "token="+tok, nil), name)
				assert.Equal(t, http.StatusUnauthorized, s.heartbeat(t, "token="+tok, nil), name)
			}
		})
	}
}

// New refuses a JWT config it cannot verify tokens with.
func TestConfigJWTRefusals(t *testing.T) {
	k := testKeys()
	rsaFile := writeFile(t, "rsa.pem", publicPEM(t, &k.rsa.PublicKey))
	der, err := x509.MarshalPKCS8PrivateKey(k.ec)
	require.NoError(t, err)
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		cfg  transport.Config
		err  string
	}{
		{"secret and JWKS", transport.Config{JWT: transport.JWTConfig{Secret: []byte("s"), JWKSURL: "https://idp.example/jwks"}}, "exactly one"},
		{"secret and key file", transport.Config{JWT: transport.JWTConfig{Secret: []byte("s"), PublicKeyFile: rsaFile}}, "exactly one"},
		{"key file and JWKS", transport.Config{JWT: transport.JWTConfig{PublicKeyFile: rsaFile, JWKSURL: "https://idp.example/jwks"}}, "exactly one"},
		{"Auth and JWT", transport.Config{Auth: transport.DemoAuth(), JWT: transport.JWTConfig{Secret: []byte("s")}}, "Auth and JWT"},
		{"JWKS settings without the URL", transport.Config{JWT: transport.JWTConfig{Secret: []byte("s"), JWKSTimeout: time.Second}}, "without JWKSURL"},
		{"JWKS settings alone", transport.Config{JWT: transport.JWTConfig{JWKSRefresh: time.Second}}, "exactly one"},
		{"negative timeout", transport.Config{JWT: transport.JWTConfig{JWKSURL: "https://idp.example/jwks", JWKSTimeout: -1}}, "negative"},
		{"no key file", transport.Config{JWT: transport.JWTConfig{PublicKeyFile: filepath.Join(t.TempDir(), "none.pem")}}, "no such file"},
		{"not PEM", transport.Config{JWT: transport.JWTConfig{PublicKeyFile: writeFile(t, "k.pem", []byte("hello"))}}, "no PEM block"},
		{"a private key", transport.Config{JWT: transport.JWTConfig{PublicKeyFile: writeFile(t, "k.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))}}, "PRIVATE KEY block"},
		{"a broken key", transport.Config{JWT: transport.JWTConfig{PublicKeyFile: writeFile(t, "k.pem", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte("xx")}))}}, "k.pem"},
		{"a P-384 key", transport.Config{JWT: transport.JWTConfig{PublicKeyFile: writeFile(t, "k.pem", publicPEM(t, &p384.PublicKey))}}, "P-256"},
		{"JWKS URL not http", transport.Config{JWT: transport.JWTConfig{JWKSURL: "file:///etc/jwks.json"}}, "http or https"},
		{"JWKS URL relative", transport.Config{JWT: transport.JWTConfig{JWKSURL: "/jwks.json"}}, "http or https"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := transport.NewManual(tc.cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
		})
	}
}
