package transport

import "time"

// bucket is a token bucket: rate tokens a second, up to burst saved.
type bucket struct {
	tokens float64
	last   time.Time
}

// take spends cost tokens if there are that many and reports whether it did.
func (b *bucket) take(now time.Time, cost, rate, burst float64) bool {
	if b.last.IsZero() {
		b.tokens = burst
	} else {
		b.tokens = min(burst, b.tokens+rate*now.Sub(b.last).Seconds())
	}
	b.last = now
	if b.tokens < cost {
		return false
	}
	b.tokens -= cost
	return true
}

// rateState limits what one connection sends: frames and bytes a second, in
// bursts. Owned by the connection's reader goroutine.
type rateState struct {
	frames, bytes bucket
	refused       int // frames refused since the last one let through
}

// limits are a Hub's inbound limits.
type limits struct {
	frameRate, frameBurst float64
	byteRate, byteBurst   float64
}

// verdict of one inbound frame.
type verdict uint8

const (
	accept verdict = iota
	refuse         // over the limit: dropped, an error frame if it is the first
	cutOff         // over the limit for a whole burst: close the connection
)

func (in *rateState) check(l *limits, now time.Time, size int) verdict {
	if in.frames.take(now, 1, l.frameRate, l.frameBurst) && in.bytes.take(now, float64(size), l.byteRate, l.byteBurst) {
		in.refused = 0
		return accept
	}
	in.refused++
	if float64(in.refused) > l.frameBurst {
		return cutOff
	}
	return refuse
}
