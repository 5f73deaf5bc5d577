package transport

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/presenced/presenced/protocol"
)

// Errors an Authenticator returns; the Hub answers ErrInvalidUID with HTTP 400
// and every other error with 401, before any WebSocket upgrade.
var (
	ErrUnauthenticated = errors.New("transport: unauthenticated")
	ErrInvalidUID      = errors.New("transport: invalid user id")
)

// Authenticator tells who sent a request. Embedders plug in their own
// (sessions, API keys, another token format); the Hub validates the user ID it
// returns with protocol.ValidUID in any case.
type Authenticator interface {
	// Authenticate returns the user ID of r, or an error wrapping
	// ErrInvalidUID (HTTP 400) or anything else (HTTP 401).
	Authenticate(r *http.Request) (uid string, err error)
}

// AuthenticatorFunc adapts a function to Authenticator.
type AuthenticatorFunc func(r *http.Request) (string, error)

// Authenticate calls f(r).
func (f AuthenticatorFunc) Authenticate(r *http.Request) (string, error) { return f(r) }

// A Session is what a SessionAuthenticator knows of a client beyond its
// user ID: until when the identity holds, and which channels it may join.
type Session struct {
	UID     string
	Expires time.Time // zero: never
	// Channels limits the channels the user may join: exact names, and
	// entries ending in "*" that allow every name with that prefix. nil
	// allows every channel.
	Channels []string
	// Watch lists the users the user may watch, with the same syntax. nil
	// allows nobody, unless the Hub's Config.AuthorizeWatch decides (or the
	// Hub is in demo mode, where everyone may watch everyone).
	Watch []string
	// Info is what the application says of the user (a token's "info"
	// claim): a JSON object of at most protocol.MaxInfo bytes, shown to
	// the clients that see the user. nil: none.
	Info json.RawMessage
}

// Allows reports whether the session may join channel.
func (s Session) Allows(channel string) bool {
	return s.Channels == nil || matchAny(s.Channels, channel)
}

// MayWatch reports whether the session's watch claim allows watching uid.
func (s Session) MayWatch(uid string) bool {
	return matchAny(s.Watch, uid)
}

// matchAny reports whether name is one of patterns, or starts with the part
// before the "*" of one ending in "*".
func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(name, prefix) || p == name {
			return true
		}
	}
	return false
}

// A SessionAuthenticator is an Authenticator whose identities expire and may
// be limited to channels; JWTAuth is one. The Hub closes a connection with
// 4401 "token expired" when its session expires, unless the client sent a
// newer token in a refresh frame first.
type SessionAuthenticator interface {
	Authenticator
	// Session authenticates r, as Authenticate does, and returns its session.
	Session(r *http.Request) (Session, error)
	// Refresh checks a token a connected client sent to extend its session.
	Refresh(token string) (Session, error)
}

// DemoAuth trusts the ?uid= query parameter: anyone can claim any identity.
// Use it for the demo only. A Hub with DemoAuth (or no
// Authenticator) runs in demo mode.
func DemoAuth() Authenticator { return demoAuth{} }

type demoAuth struct{}

func (demoAuth) Authenticate(r *http.Request) (string, error) {
	uid := r.URL.Query().Get("uid")
	if !protocol.ValidUID(uid) {
		return "", fmt.Errorf("%w: %q", ErrInvalidUID, uid)
	}
	return uid, nil
}

// JWTAuth verifies an HS256 token signed with secret, taken from the
// "Authorization: Bearer" header or else the ?token= query parameter
// (browsers cannot set headers on a WebSocket). Its "sub" claim is the user
// ID and "exp" is required; "nbf" is enforced when present; "exp", "nbf"
// and "iat" must be JSON numbers. An optional "channels" claim, an array of
// channel names where an entry ending in "*" is a prefix, limits the
// channels the user may join; an optional "watch" claim, the same over user
// IDs, says whom the user may watch. A claim of another kind than an array
// of strings, null included, is refused.
// For RS256 and ES256 tokens, see NewJWTAuth.
func JWTAuth(secret []byte) SessionAuthenticator {
	key := append([]byte(nil), secret...)
	return newJWTAuth([]string{"HS256"}, func(*jwt.Token) (any, error) { return key, nil })
}

// newJWTAuth verifies tokens of the algorithms methods with the keys of
// key.
func newJWTAuth(methods []string, key jwt.Keyfunc) *jwtAuth {
	return &jwtAuth{key: key, parser: jwt.NewParser(jwt.WithValidMethods(methods), jwt.WithExpirationRequired())}
}

type jwtAuth struct {
	key    jwt.Keyfunc
	parser *jwt.Parser
}

// jwtClaims are the claims JWTAuth reads. Channels and Watch stay raw so
// that an absent claim and a null one can be told apart.
type jwtClaims struct {
	jwt.RegisteredClaims
	Channels json.RawMessage `json:"channels,omitempty"`
	Watch    json.RawMessage `json:"watch,omitempty"`
	Info     json.RawMessage `json:"info,omitempty"`
}

// listClaim reads an optional claim that must be an array of strings: nil
// when absent.
func listClaim(name string, raw json.RawMessage) ([]string, error) {
	if raw == nil {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil || list == nil {
		return nil, fmt.Errorf("%w: the %q claim must be an array of strings", ErrUnauthenticated, name)
	}
	return list, nil
}

// numericDates checks that the time claims of a token's payload, when
// present, are JSON numbers: the JWT library also takes numeric strings.
func (a *jwtAuth) numericDates(raw string) error {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return fmt.Errorf("%w: malformed token", ErrUnauthenticated)
	}
	payload, err := a.parser.DecodeSegment(parts[1])
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	var claims map[string]json.RawMessage
	if err := json.Unmarshal(payload, &claims); err != nil {
		return fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	for _, name := range []string{"exp", "nbf", "iat"} {
		if v, ok := claims[name]; ok {
			var n json.Number
			if len(v) == 0 || v[0] == '"' || json.Unmarshal(v, &n) != nil {
				return fmt.Errorf("%w: the %q claim must be a number", ErrUnauthenticated, name)
			}
		}
	}
	return nil
}

func (a *jwtAuth) Authenticate(r *http.Request) (string, error) {
	s, err := a.Session(r)
	return s.UID, err
}

func (a *jwtAuth) Session(r *http.Request) (Session, error) {
	raw := bearerToken(r)
	if raw == "" {
		return Session{}, fmt.Errorf("%w: no token (Authorization: Bearer or ?token=)", ErrUnauthenticated)
	}
	return a.Refresh(raw)
}

func (a *jwtAuth) Refresh(raw string) (Session, error) {
	var claims jwtClaims
	if _, err := a.parser.ParseWithClaims(raw, &claims, a.key); err != nil {
		return Session{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	if claims.Subject == "" {
		return Session{}, fmt.Errorf("%w: token has no sub claim", ErrUnauthenticated)
	}
	if !protocol.ValidUID(claims.Subject) {
		return Session{}, fmt.Errorf("%w: token subject %q", ErrInvalidUID, claims.Subject)
	}
	if err := a.numericDates(raw); err != nil {
		return Session{}, err
	}
	s := Session{UID: claims.Subject, Expires: claims.ExpiresAt.Time}
	var err error
	if s.Channels, err = listClaim("channels", claims.Channels); err != nil {
		return Session{}, err
	}
	if s.Watch, err = listClaim("watch", claims.Watch); err != nil {
		return Session{}, err
	}
	if claims.Info != nil {
		if s.Info, err = protocol.CheckInfo(claims.Info); err != nil {
			return Session{}, fmt.Errorf("%w: the \"info\" claim: %w", ErrUnauthenticated, err)
		}
	}
	return s, nil
}

// bearerToken returns the token of "Authorization: Bearer", or else of
// ?token=: another Authorization scheme, set by a proxy, does not hide it.
func bearerToken(r *http.Request) string {
	if scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(tok)
	}
	return r.URL.Query().Get("token")
}

// session authenticates r with auth, as a Session whatever kind auth is.
func session(auth Authenticator, r *http.Request) (Session, error) {
	if sa, ok := auth.(SessionAuthenticator); ok {
		return sa.Session(r)
	}
	uid, err := auth.Authenticate(r)
	return Session{UID: uid}, err
}

// authStatus maps an Authenticator error to its HTTP status.
func authStatus(err error) int {
	if errors.Is(err, ErrInvalidUID) {
		return http.StatusBadRequest
	}
	return http.StatusUnauthorized
}
