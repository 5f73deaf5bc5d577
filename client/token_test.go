package client_test

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/presenced/presenced/client"
)

func jwtWith(payload string) string {
	return "eyJhbGciOiJIUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".sig"
}

func TestTokenExpiry(t *testing.T) {
	cases := []struct {
		name  string
		token string
		want  time.Time
		ok    bool
	}{
		{"integer", jwtWith(`{"sub":"alice","exp":1764000000}`), time.Unix(1764000000, 0), true},
		{"fraction", jwtWith(`{"exp":1764000000.5}`), time.Unix(1764000000, 5e8), true},
		{"padded", strings.Replace(jwtWith(`{"exp":1}`), ".sig", "", 1) + "==.sig", time.Unix(1, 0), true},
		{"no exp", jwtWith(`{"sub":"alice"}`), time.Time{}, false},
		{"string exp", jwtWith(`{"exp":"1764000000"}`), time.Time{}, false},
		{"negative", jwtWith(`{"exp":-5}`), time.Time{}, false},
		{"huge", jwtWith(`{"exp":1e300}`), time.Time{}, false},
		{"not JSON", jwtWith(`exp`), time.Time{}, false},
		{"two parts", "a.b", time.Time{}, false},
		{"not base64", "a.!!!.c", time.Time{}, false},
		{"empty", "", time.Time{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := client.TokenExpiry(tc.token)
			assert.Equal(t, tc.ok, ok)
			assert.True(t, tc.want.Equal(got), "exp %v, want %v", got, tc.want)
		})
	}
}

func FuzzTokenExpiry(f *testing.F) {
	f.Add(jwtWith(`{"exp":1764000000}`))
	f.Add(jwtWith(`{"exp":1.5e9}`))
	f.Add("a.b.c")
	f.Add("..")
	f.Fuzz(func(t *testing.T, token string) {
		exp, ok := client.TokenExpiry(token)
		if ok && !exp.After(time.Unix(0, 0)) {
			t.Fatalf("exp %v from %q", exp, token)
		}
		if !ok && !exp.IsZero() {
			t.Fatalf("not ok, but exp %v", exp)
		}
	})
}

func TestRefreshAt(t *testing.T) {
	now := time.Unix(1000, 0)
	cases := []struct {
		left, lead time.Duration
	}{
		{time.Hour, 15 * time.Minute},              // a quarter
		{time.Minute, 30 * time.Second},            // at least half a minute
		{3 * time.Second, 1500 * time.Millisecond}, // half of a short one
		{0, 0},                       // now
		{-time.Second, -time.Second}, // expired: now
	}
	for _, tc := range cases {
		got := client.RefreshAt(now, now.Add(tc.left))
		want := now.Add(tc.left - tc.lead)
		if tc.left <= 0 {
			want = now
		}
		assert.Equal(t, want, got, "token with %s left", tc.left)
	}
}

func TestBackoff(t *testing.T) {
	lo, hi := 100*time.Millisecond, time.Second
	for n, ceil := range []time.Duration{100, 200, 400, 800, 1000, 1000, 1000} {
		ceil *= time.Millisecond
		for range 50 {
			d := client.Backoff(n, lo, hi)
			assert.True(t, d >= ceil/2 && d <= ceil, "attempt %d: %s not within [%s, %s]", n, d, ceil/2, ceil)
		}
	}
	d := client.Backoff(1000, lo, hi)
	assert.True(t, d >= hi/2 && d <= hi, "attempt 1000: %s, no overflow", d)
}
