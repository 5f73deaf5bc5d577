package transport

import "time"

// bucket is a token bucket: rate tokens a second, up to burst saved.
type bucket struct {
	tokens float64
	last   int64 // UnixNano of the last take; 0: never
}

// take spends cost tokens if there are that many and reports whether it did.
func (b *bucket) take(now time.Time, cost, rate, burst float64) bool {
	t := now.UnixNano()
	if b.last == 0 {
		b.tokens = burst
	} else {
		b.tokens = min(burst, b.tokens+rate*float64(max(0, t-b.last))/1e9)
	}
	b.last = t
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
	refused       int32     // frames refused since the last one let through
	overflowed    bool      // the inbox refused a frame since it last took one
	cut           *refusals // nil until a frame is refused
}

// refusals are the refused frames per second over the last cutWindow
// seconds, by Unix second modulo cutWindow; newest is the second of the
// latest count.
type refusals struct {
	window [cutWindow]int32
	newest int64
}

// cutWindow is the longest window the flood cut looks back over, seconds.
const cutWindow = 10

// limits are a Hub's inbound limits.
type limits struct {
	frameRate, frameBurst float64
	byteRate, byteBurst   float64
}

// The flood cut, in refused frames: a connection is closed once it had
// more than slowCut refused in the last 10 s (sending at twice the frame
// rate gets there within 10 s) or more than fastCut in the last 3 s (twenty
// times the rate: within 3 s). Both leave room for a single burst of the
// burst size plus 100 frames, whose 100 refused frames are forgiven.
func (l *limits) slowCut() int32 { return int32(100 + 3*l.frameRate) }
func (l *limits) fastCut() int32 { return int32(100 + 20*l.frameRate) }

// verdict of one inbound frame.
type verdict uint8

const (
	accept verdict = iota
	refuse         // over the limit: dropped, an error frame if it is the first of a run
	cutOff         // over the limit for too long: close the connection
)

func (in *rateState) check(l *limits, now time.Time, size int) verdict {
	if in.frames.take(now, 1, l.frameRate, l.frameBurst) && in.bytes.take(now, float64(size), l.byteRate, l.byteBurst) {
		in.refused = 0
		return accept
	}
	in.refused++
	last3, last10 := in.count(now.Unix())
	if last3 > l.fastCut() || last10 > l.slowCut() {
		return cutOff
	}
	return refuse
}

// count records one refused frame in second sec and returns the refused
// frames of the last 3 and the last 10 seconds, sec included.
func (st *rateState) count(sec int64) (last3, last10 int32) {
	if st.cut == nil {
		st.cut = new(refusals)
	}
	in := st.cut
	if sec-in.newest >= cutWindow {
		clear(in.window[:])
	} else {
		for s := in.newest + 1; s <= sec; s++ {
			in.window[s%cutWindow] = 0
		}
	}
	in.newest = max(in.newest, sec)
	in.window[sec%cutWindow]++
	for i := range int64(cutWindow) {
		n := in.window[(in.newest-i)%cutWindow]
		if i < 3 {
			last3 += n
		}
		last10 += n
	}
	return last3, last10
}
