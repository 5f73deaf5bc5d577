package client

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// tokenExpiry reads the "exp" claim of a JWT without verifying the token:
// the server does that. ok is false for a token that is not a JWT or has
// no numeric exp.
func tokenExpiry(token string) (exp time.Time, ok bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *float64 `json:"exp"` // a number: a numeric string is refused, as the server does
	}
	if err := json.Unmarshal(payload, &claims); err != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	sec := *claims.Exp
	if math.IsNaN(sec) || sec <= 0 || sec > 1<<40 {
		return time.Time{}, false
	}
	whole, frac := math.Modf(sec)
	return time.Unix(int64(whole), int64(frac*1e9)), true
}

// refreshAt is when to refresh a token that expires at exp, seen at now:
// a quarter of the time left before exp, but at least half a minute before
// (half the time left for a short-lived token).
func refreshAt(now, exp time.Time) time.Time {
	left := exp.Sub(now)
	if left <= 0 {
		return now
	}
	lead := max(left/4, min(left/2, 30*time.Second))
	return exp.Add(-lead)
}

// backoff is the wait before reconnect attempt n (0 for the first after a
// live connection): lo doubled n times, at most hi, jittered down by up to
// half so clients that dropped together do not come back together.
func backoff(n int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 0; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return d/2 + rand.N(d/2+1)
}
