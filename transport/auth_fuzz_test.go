package transport

import (
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
)

// FuzzAuthenticate: whatever token or uid a request carries, the built-in
// authenticators never panic, and they accept only valid user IDs (a fuzzed
// token cannot carry a valid signature).
func FuzzAuthenticate(f *testing.F) {
	for _, s := range []string{"alice", "", "a b", "eyJhbGciOiJIUzI1NiJ9.e30.x", "Bearer x", "\x00"} {
		f.Add(s)
	}
	jwtAuth := JWTAuth([]byte("k"))
	f.Fuzz(func(t *testing.T, s string) {
		r := httptest.NewRequest("GET", "/ws?uid="+url.QueryEscape(s)+"&token="+url.QueryEscape(s), nil)
		r.Header.Set("Authorization", "Bearer "+s)
		if uid, err := DemoAuth().Authenticate(r); err == nil {
			require.True(t, protocol.ValidUID(uid))
			require.Equal(t, s, uid)
		} else {
			require.False(t, protocol.ValidUID(s))
		}
		_, err := jwtAuth.Authenticate(r)
		require.Error(t, err)
	})
}

// FuzzOriginPolicy: any Origin and Host header are judged without a panic,
// and the request's own host is always allowed.
func FuzzOriginPolicy(f *testing.F) {
	f.Add("https://a.example", "a.example", "b.example")
	f.Add("null", "h:80", "*")
	f.Add("http://[::1]:80", "[::1]:80", "")
	f.Fuzz(func(t *testing.T, origin, host, allowed string) {
		p := newOriginPolicy([]string{allowed})
		r := httptest.NewRequest("GET", "/ws", nil)
		r.Host = host
		r.Header.Set("Origin", origin)
		ok := p.allow(r)
		if u, err := url.Parse(origin); err == nil && u.Host != "" && u.Host == host {
			require.True(t, ok)
		}
	})
}
