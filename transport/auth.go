package transport

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/golang-jwt/jwt/v5"
)

// MaxUIDLen is the longest user ID accepted.
const MaxUIDLen = 64

// Errors an Authenticator returns; the Hub answers ErrInvalidUID with HTTP 400
// and every other error with 401, before any WebSocket upgrade.
var (
	ErrUnauthenticated = errors.New("transport: unauthenticated")
	ErrInvalidUID      = errors.New("transport: invalid user id")
)

// Authenticator tells who sent a request. Embedders plug in their own
// (sessions, API keys, another token format); the Hub validates the user ID it
// returns with ValidUID in any case.
type Authenticator interface {
	// Authenticate returns the user ID of r, or an error wrapping
	// ErrInvalidUID (HTTP 400) or anything else (HTTP 401).
	Authenticate(r *http.Request) (uid string, err error)
}

// AuthenticatorFunc adapts a function to Authenticator.
type AuthenticatorFunc func(r *http.Request) (string, error)

// Authenticate calls f(r).
func (f AuthenticatorFunc) Authenticate(r *http.Request) (string, error) { return f(r) }

// ValidUID reports whether uid is 1 to 64 ASCII letters, digits and "_.-@".
func ValidUID(uid string) bool {
	if len(uid) == 0 || len(uid) > MaxUIDLen {
		return false
	}
	for i := 0; i < len(uid); i++ {
		c := uid[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '_', c == '.', c == '-', c == '@':
		default:
			return false
		}
	}
	return true
}

// DemoAuth trusts the ?uid= query parameter: anyone can claim any identity.
// Use it for the demo and for tests only.
func DemoAuth() Authenticator {
	return AuthenticatorFunc(func(r *http.Request) (string, error) {
		uid := r.URL.Query().Get("uid")
		if !ValidUID(uid) {
			return "", fmt.Errorf("%w: %q", ErrInvalidUID, uid)
		}
		return uid, nil
	})
}

// JWTAuth verifies an HS256 token signed with secret, taken from the
// "Authorization: Bearer" header or else the ?token= query parameter
// (browsers cannot set headers on a WebSocket). Its "sub" claim is the user
// ID; "exp" and "nbf", when present, are enforced.
func JWTAuth(secret []byte) Authenticator {
	key := append([]byte(nil), secret...)
	parser := jwt.NewParser(jwt.WithValidMethods([]string{"HS256"}))
	keyFunc := func(*jwt.Token) (any, error) { return key, nil }
	return AuthenticatorFunc(func(r *http.Request) (string, error) {
		raw := bearerToken(r)
		if raw == "" {
			return "", fmt.Errorf("%w: no token (Authorization: Bearer or ?token=)", ErrUnauthenticated)
		}
		var claims jwt.RegisteredClaims
		if _, err := parser.ParseWithClaims(raw, &claims, keyFunc); err != nil {
			return "", fmt.Errorf("%w: %w", ErrUnauthenticated, err)
		}
		if claims.Subject == "" {
			return "", fmt.Errorf("%w: token has no sub claim", ErrUnauthenticated)
		}
		if !ValidUID(claims.Subject) {
			return "", fmt.Errorf("%w: token subject %q", ErrInvalidUID, claims.Subject)
		}
		return claims.Subject, nil
	})
}

func bearerToken(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
		return ""
	}
	return r.URL.Query().Get("token")
}

// authStatus maps an Authenticator error to its HTTP status.
func authStatus(err error) int {
	if errors.Is(err, ErrInvalidUID) {
		return http.StatusBadRequest
	}
	return http.StatusUnauthorized
}
