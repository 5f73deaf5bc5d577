package webhook

// minRing is the smallest buffer a ring allocates; shrinkAbove is the size
// past which an emptied ring lets its buffer go, so that the memory of one
// outage's backlog is not kept once it drained.
const (
	minRing     = 64
	shrinkAbove = 4096
)

// ring is a FIFO of at most limit events, which drops its oldest to take
// new ones. Its buffer grows as needed up to limit rather than being
// allocated at once: the default limit is 100,000 events, mostly unused.
type ring struct {
	buf   []Event
	head  int // index of the oldest event
	n     int // events held
	limit int
}

// push appends evs, dropping the oldest events past the limit (the first of
// evs themselves if they alone exceed it), and returns how many it dropped.
func (r *ring) push(evs []Event) (dropped int) {
	if over := len(evs) - r.limit; over > 0 {
		evs = evs[over:]
		dropped += over
	}
	if over := r.n + len(evs) - r.limit; over > 0 {
		r.discard(over)
		dropped += over
	}
	r.grow(r.n + len(evs))
	for len(evs) > 0 {
		tail := (r.head + r.n) % len(r.buf)
		end := len(r.buf)
		if tail < r.head {
			end = r.head
		}
		c := copy(r.buf[tail:end], evs)
		r.n += c
		evs = evs[c:]
	}
	return dropped
}

// dropping returns the events that push(evs) would drop: the oldest held
// ones, and the first of evs if they alone exceed the limit.
func (r *ring) dropping(evs []Event) (held, given []Event) {
	if over := len(evs) - r.limit; over > 0 {
		given, evs = evs[:over], evs[over:]
	}
	for i := range max(0, r.n+len(evs)-r.limit) {
		held = append(held, r.buf[(r.head+i)%len(r.buf)])
	}
	return held, given
}

// pop removes and returns up to max of the oldest events, oldest first.
func (r *ring) pop(max int) []Event {
	k := min(max, r.n)
	if k == 0 {
		return nil
	}
	out := make([]Event, k)
	first := copy(out, r.buf[r.head:min(r.head+k, len(r.buf))])
	copy(out[first:], r.buf[:k-first])
	r.discard(k)
	if r.n == 0 && len(r.buf) > shrinkAbove {
		r.buf, r.head = nil, 0
	}
	return out
}

// discard removes the k oldest events, clearing their slots so that their
// strings can be collected.
func (r *ring) discard(k int) {
	for i := 0; i < k; i++ {
		r.buf[(r.head+i)%len(r.buf)] = Event{}
	}
	r.n -= k
	if r.n == 0 {
		r.head = 0
	} else {
		r.head = (r.head + k) % len(r.buf)
	}
}

// grow makes room for need events (at most limit), keeping their order.
func (r *ring) grow(need int) {
	if need <= len(r.buf) {
		return
	}
	size := min(max(need, 2*len(r.buf), minRing), r.limit)
	buf := make([]Event, size)
	first := copy(buf, r.buf[r.head:min(r.head+r.n, len(r.buf))])
	copy(buf[first:], r.buf[:r.n-first])
	r.buf, r.head = buf, 0
}
