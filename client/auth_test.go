package client_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/client"
	"github.com/presenced/presenced/protocol"
	"github.com/presenced/presenced/transport"
)

var secret = []byte("client-test-secret")

// jwtServer serves with JWT authentication on a real clock, which the
// tokens' exp is checked against.
func jwtServer(t *testing.T) *server {
	cfg := realClock()
	cfg.auth = transport.JWTAuth(secret)
	return startServer(t, cfg)
}

// token signs a token for uid that expires in ttl (rounded down to the
// second, as exp is in seconds).
func token(t *testing.T, uid string, ttl time.Duration) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject:   uid,
		ExpiresAt: jwt.NewNumericDate(time.Now().Add(ttl)),
	}).SignedString(secret)
	require.NoError(t, err)
	return tok
}

// TestRefreshBeforeExp: with RefreshToken, the Client sends a newer token
// before each exp, so its one connection outlives several tokens.
func TestRefreshBeforeExp(t *testing.T) {
	s := jwtServer(t)
	var refreshes atomic.Int64
	first := token(t, "alice", 3*time.Second)
	firstExp, ok := client.TokenExpiry(first)
	require.True(t, ok)
	alice := dial(t, s, client.Options{
		Token:    first,
		Channels: []string{"lobby"},
		RefreshToken: func(context.Context) (string, error) {
			refreshes.Add(1)
			return token(t, "alice", 3*time.Second), nil
		},
	})
	eventually(t, func() bool { return refreshes.Load() >= 3 && time.Now().After(firstExp.Add(time.Second)) },
		"three refreshes, and past the first token's exp")
	assert.Equal(t, client.Live, alice.State())
	assert.Equal(t, int64(1), s.upgrades.Load(), "one connection all along")
	assert.Equal(t, []string{"alice"}, s.members(t, "lobby"))
	for len(alice.Events()) > 0 {
		ev := <-alice.Events()
		if sc, ok := ev.(*client.StateChange); ok && sc.State != client.Live {
			t.Errorf("connection state changed: %+v", sc)
		}
		if e, ok := ev.(*protocol.Error); ok {
			t.Errorf("error frame: %+v", e)
		}
	}
}

// TestNoRetry: the Client stops for good, without dialing again, on a
// close it must not retry, and says why.
func TestNoRetry(t *testing.T) {
	cases := []struct {
		name    string
		opts    func(t *testing.T) client.Options
		end     func(t *testing.T, s *server)
		code    int
		refresh bool // RefreshToken was tried
	}{
		{
			name: "4403 disconnected",
			opts: func(t *testing.T) client.Options {
				o := fast("", "lobby")
				o.Token = token(t, "alice", time.Hour)
				return o
			},
			end:  func(t *testing.T, s *server) { require.NoError(t, s.hub.Disconnect(ctxLong(t), "alice")) },
			code: protocol.CloseDisconnected,
		},
		{
			name: "4401 without RefreshToken",
			opts: func(t *testing.T) client.Options {
				o := fast("", "lobby")
				o.Token = token(t, "alice", 2*time.Second)
				return o
			},
			code: protocol.CloseTokenExpired,
		},
		{
			name: "4401 and RefreshToken has none",
			opts: func(t *testing.T) client.Options {
				o := fast("", "lobby")
				o.Token = token(t, "alice", 2*time.Second)
				o.RefreshToken = func(context.Context) (string, error) { return "", errors.New("signed out") }
				return o
			},
			code:    protocol.CloseTokenExpired,
			refresh: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := jwtServer(t)
			alice := dial(t, s, tc.opts(t))
			if tc.end != nil {
				tc.end(t, s)
			}
			evs := drain(t, alice) // until the Client stops
			last, ok := evs[len(evs)-1].(*client.StateChange)
			require.True(t, ok, "the last event is the state change")
			assert.Equal(t, client.Closed, last.State)
			assert.Equal(t, tc.code, last.Code)
			assert.Equal(t, tc.code, closeErr(t, alice.Err()).Code)
			assert.ErrorIs(t, alice.Join(ctxLong(t), "room-7"), alice.Err(), "calls fail with why it stopped")
			assert.Equal(t, int64(1), s.upgrades.Load(), "no retry")
			// The server may still be closing its side when the Client has stopped.
			assert.Eventually(t, func() bool { return len(s.members(t, "lobby")) == 0 }, waitLong, 10*time.Millisecond,
				"alice left the lobby")
		})
	}
}

// TestExpiredTokenIsRefreshed: a token the server refuses (4401 at exp, or
// 401 at the handshake) is replaced with one from RefreshToken, and the
// Client reconnects with it.
func TestExpiredTokenIsRefreshed(t *testing.T) {
	s := jwtServer(t)
	first := token(t, "alice", 2*time.Second)
	exp, ok := client.TokenExpiry(first)
	require.True(t, ok)
	var calls atomic.Int64
	opts := fast("", "lobby")
	opts.Token = first
	opts.RefreshToken = func(ctx context.Context) (string, error) {
		calls.Add(1)
		if time.Now().Before(exp) {
			return "", errors.New("not yet") // so the server closes with 4401
		}
		// The server closes at its first tick past exp: a token the Client
		// got sooner would go out as a refresh and keep the connection.
		for s.upgrades.Load() == 1 {
			if _, members, err := s.hub.Members(ctx, "lobby", 1); err != nil || len(members) == 0 {
				break
			}
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		return token(t, "alice", time.Hour), nil
	}
	alice := dial(t, s, opts)
	sc := nextState(t, alice, client.Waiting)
	assert.Equal(t, protocol.CloseTokenExpired, sc.Code)
	nextState(t, alice, client.Live)
	assert.Equal(t, int64(2), s.upgrades.Load())
	assert.Equal(t, []string{"alice"}, s.members(t, "lobby"))

	// At the handshake: Dial with an expired token.
	opts.Token = token(t, "alice", -time.Minute)
	bob, err := client.Dial(ctxLong(t), s.url(), opts)
	require.NoError(t, err)
	require.NoError(t, bob.Close())
	assert.Equal(t, int64(4), s.upgrades.Load(), "refused, then dialed with the new token")

	opts.RefreshToken = nil
	_, err = client.Dial(ctxLong(t), s.url(), opts)
	assert.Equal(t, http.StatusUnauthorized, closeErr(t, err).Status)
}
