package transport

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// Defaults of the JWKS settings of JWTConfig.
const (
	DefaultJWKSRefresh    = time.Hour
	DefaultJWKSUnknownKID = 30 * time.Second
	DefaultJWKSTimeout    = 10 * time.Second
)

// maxJWKSBody bounds a JWKS document: real ones are a few KiB.
const maxJWKSBody = 256 << 10

// JWTConfig says which key verifies client tokens: set exactly one of
// Secret, PublicKeyFile and JWKSURL. One source, because whoever holds any
// key the server trusts can mint every identity: a second one only adds a
// way in. The algorithm is pinned by the key: an HMAC secret verifies HS256
// alone, an RSA key RS256 alone, an EC P-256 key ES256 alone, so no token
// picks how it is checked (a token signed "HS256" with an RSA public key's
// bytes is refused). The claims are read as JWTAuth says.
type JWTConfig struct {
	// Secret verifies HS256 tokens.
	Secret []byte
	// PublicKeyFile is a PEM file holding one public key, RSA (for RS256
	// tokens, at least 2048 bits) or EC P-256 (ES256): a PUBLIC KEY block
	// (PKIX), an RSA PUBLIC KEY block (PKCS #1) or a CERTIFICATE. It is read
	// once, by NewJWTAuth; a private key is refused.
	PublicKeyFile string
	// JWKSURL is an http or https URL of a JSON Web Key Set of RSA and EC
	// P-256 keys: a token names its key by its "kid" header (one without
	// kid is tried against every key of its algorithm). The set is fetched
	// at start, every JWKSRefresh, and again for a token whose kid it lacks,
	// at most once per JWKSUnknownKID, so tokens with made-up kids cannot
	// make the server hammer the key server: a kid still unknown is 401.
	// While no fetch has succeeded (the key server is down at start) every
	// token is 401; the server starts anyway and logs why.
	JWKSURL string
	// JWKSRefresh is how often the set is fetched anew, dropping the keys
	// it no longer has; 0 means an hour.
	JWKSRefresh time.Duration
	// JWKSUnknownKID is the least time between two fetches made for unknown
	// kids; 0 means 30 s.
	JWKSUnknownKID time.Duration
	// JWKSTimeout bounds one fetch; 0 means 10 s. A body over 256 KiB is
	// refused.
	JWKSTimeout time.Duration
	// Logger receives failed fetches; nil: silent.
	Logger *slog.Logger
}

// used reports whether c sets anything but Logger: a JWKS setting without
// the URL is a mistake to report, not a config to ignore.
func (c JWTConfig) used() bool {
	return len(c.Secret) > 0 || c.PublicKeyFile != "" || c.JWKSURL != "" ||
		c.JWKSRefresh != 0 || c.JWKSUnknownKID != 0 || c.JWKSTimeout != 0
}

// NewJWTAuth returns the SessionAuthenticator that cfg describes, and stop,
// which ends its JWKS refreshes (a no-op without JWKSURL). It fails when
// cfg sets no key or more than one source, or when the key file cannot be
// read or holds no public key of a kind it takes. A Hub whose Config.JWT is
// set calls it itself and stops it at Shutdown.
func NewJWTAuth(cfg JWTConfig) (auth SessionAuthenticator, stop func(), err error) {
	set := 0
	for _, ok := range []bool{len(cfg.Secret) > 0, cfg.PublicKeyFile != "", cfg.JWKSURL != ""} {
		if ok {
			set++
		}
	}
	if set != 1 {
		return nil, nil, errors.New("transport: JWTConfig: set exactly one of Secret, PublicKeyFile and JWKSURL")
	}
	switch {
	case cfg.JWKSRefresh < 0 || cfg.JWKSUnknownKID < 0 || cfg.JWKSTimeout < 0:
		return nil, nil, errors.New("transport: JWTConfig: JWKSRefresh, JWKSUnknownKID and JWKSTimeout must not be negative")
	case cfg.JWKSURL == "" && (cfg.JWKSRefresh != 0 || cfg.JWKSUnknownKID != 0 || cfg.JWKSTimeout != 0):
		return nil, nil, errors.New("transport: JWTConfig: JWKSRefresh, JWKSUnknownKID and JWKSTimeout without JWKSURL")
	}
	switch {
	case len(cfg.Secret) > 0:
		return JWTAuth(cfg.Secret), func() {}, nil
	case cfg.PublicKeyFile != "":
		key, alg, err := readPublicKey(cfg.PublicKeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("transport: JWTConfig.PublicKeyFile: %w", err)
		}
		return newJWTAuth([]string{alg}, func(t *jwt.Token) (any, error) { return key, pinned(t.Method.Alg(), key) }), func() {}, nil
	}
	j, err := newJWKS(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("transport: JWTConfig.JWKSURL: %w", err)
	}
	return newJWTAuth([]string{"RS256", "ES256"}, j.key), j.stop, nil
}

// readPublicKey reads the PEM file of one public key and returns it with
// the one algorithm it verifies.
func readPublicKey(path string) (any, string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	block, _ := pem.Decode(raw)
	if block == nil {
		return nil, "", fmt.Errorf("%s: no PEM block", path)
	}
	var key any
	switch block.Type {
	case "PUBLIC KEY":
		key, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		key, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			key = cert.PublicKey
		}
	default:
		// A private key on this side would be one more copy to leak.
		return nil, "", fmt.Errorf("%s: a %s block: want PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE", path, block.Type)
	}
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	for _, alg := range []string{"RS256", "ES256"} {
		if pinned(alg, key) == nil {
			return key, alg, nil
		}
	}
	return nil, "", fmt.Errorf("%s: a %T: want an RSA key of at least 2048 bits or an EC P-256 key", path, key)
}

// pinned checks that key verifies alg: the only pairs are an RSA key (of
// at least 2048 bits) with RS256 and an EC P-256 key with ES256.
func pinned(alg string, key any) error {
	switch k := key.(type) {
	case *rsa.PublicKey:
		if alg == "RS256" && k.N.BitLen() >= 2048 {
			return nil
		}
	case *ecdsa.PublicKey:
		if alg == "ES256" && k.Curve == elliptic.P256() {
			return nil
		}
	}
	return fmt.Errorf("a %s token cannot be verified with a %T", alg, key)
}

// jwks is a JWKS kept fresh: cached reads its keys as last fetched,
// refetch fetches them first.
type jwks struct {
	ctx     context.Context
	stop    context.CancelFunc
	cached  keyfunc.Keyfunc
	refetch keyfunc.Keyfunc
	unknown *rate.Limiter // fetches for unknown kids
	timeout time.Duration
}

func newJWKS(cfg JWTConfig) (*jwks, error) {
	u, err := url.Parse(cfg.JWKSURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "https" && u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("%q: want an http or https URL", cfg.JWKSURL)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if u.Scheme == "http" {
		log.Warn("transport: the JWKS is fetched over plain http: whoever is on the path can swap the keys", "url", u.Redacted())
	}
	timeout := cmp.Or(cfg.JWKSTimeout, DefaultJWKSTimeout)
	ctx, stop := context.WithCancel(context.Background())
	store, err := jwkset.NewStorageFromHTTP(cfg.JWKSURL, jwkset.HTTPClientStorageOptions{
		Client:                    &http.Client{Transport: cappedBodies{http.DefaultTransport}, Timeout: timeout},
		Ctx:                       ctx,
		HTTPTimeout:               timeout,
		NoErrorReturnFirstHTTPReq: true,
		RefreshInterval:           cmp.Or(cfg.JWKSRefresh, DefaultJWKSRefresh),
		RefreshErrorHandler: func(_ context.Context, err error) {
			log.Warn("transport: JWKS fetch failed; tokens signed with keys not fetched yet get 401", "url", u.Redacted(), "err", err)
		},
	})
	if err != nil {
		stop()
		return nil, err
	}
	// Two views of one store: the first never fetches, so j.key decides
	// when an unknown kid may cost a fetch without waiting for the limiter.
	cached, err := jwkset.NewHTTPClient(jwkset.HTTPClientOptions{HTTPURLs: map[string]jwkset.Storage{cfg.JWKSURL: store}})
	if err != nil {
		stop()
		return nil, err
	}
	refetching, err := jwkset.NewHTTPClient(jwkset.HTTPClientOptions{HTTPURLs: map[string]jwkset.Storage{cfg.JWKSURL: store},
		RefreshUnknownKID: rate.NewLimiter(rate.Inf, 1)})
	if err != nil {
		stop()
		return nil, err
	}
	j := &jwks{ctx: ctx, stop: stop, timeout: timeout,
		unknown: rate.NewLimiter(rate.Every(cmp.Or(cfg.JWKSUnknownKID, DefaultJWKSUnknownKID)), 1)}
	if j.cached, err = keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: cached}); err != nil {
		stop()
		return nil, err
	}
	if j.refetch, err = keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: refetching}); err != nil {
		stop()
		return nil, err
	}
	return j, nil
}

// key is the jwt.Keyfunc of the set: the key the token's kid names, fetched
// again if need be and the limiter allows, and only if its type fits the
// token's algorithm; without kid, the keys whose type fits it.
func (j *jwks) key(t *jwt.Token) (any, error) {
	key, err := j.cached.Keyfunc(t)
	if errors.Is(err, jwkset.ErrKeyNotFound) && j.unknown.Allow() {
		ctx, cancel := context.WithTimeout(j.ctx, j.timeout)
		defer cancel()
		key, err = j.refetch.KeyfuncCtx(ctx)(t)
	}
	if err != nil {
		return nil, err
	}
	alg := t.Method.Alg()
	if set, ok := key.(jwt.VerificationKeySet); ok {
		var fit jwt.VerificationKeySet
		for _, k := range set.Keys {
			if pinned(alg, k) == nil {
				fit.Keys = append(fit.Keys, k)
			}
		}
		if len(fit.Keys) == 0 {
			return nil, fmt.Errorf("no key of the set verifies %s", alg)
		}
		return fit, nil
	}
	return key, pinned(alg, key)
}

// cappedBodies refuses response bodies over maxJWKSBody.
type cappedBodies struct{ next http.RoundTripper }

func (c cappedBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err == nil {
		resp.Body = &cappedBody{resp.Body, maxJWKSBody}
	}
	return resp, err
}

type cappedBody struct {
	io.ReadCloser
	left int64
}

var errJWKSTooBig = fmt.Errorf("the JWKS is over %d KiB", maxJWKSBody>>10)

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errJWKSTooBig
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}
