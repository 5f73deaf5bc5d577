package tracker

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

const (
	ttlEmpty = 0             // a table slot never used
	ttlGone  = ^uint32(0)    // a tombstone: the key was removed or expired
	maxTTL   = 1<<32 - 2     // the longest timeout, in steps
	atMask   = 1<<24 - 1     // entry.meta: the low 24 bits of the step of the next check
	minTable = 8             // the smallest table a shard allocates
	maxLoad  = 13            // rehash when used slots exceed maxLoad/16 of the table
	tagShift = 24            // entry.meta: the high 8 bits are a tag of the key's hash
	hashBits = 6             // low bits of a key's hash pick the shard
	nShards  = 1 << hashBits // shards of the key space
)

// shard is one stripe of the key space: a hash table of entries and its own
// copy of the ring's slot lists.
//
// Touch, Online and Ring read the table without a lock, so keepalives on
// different cores write no shared memory but the keys' own words. Everything
// else (adding, removing, stepping, rehashing) holds mu. The lock order is
// shard.mu, then dispatcher.mu; never the reverse.
type shard[K comparable] struct {
	mu sync.Mutex
	// now is the step this shard has reached; a step stores it under mu
	// before it checks the shard's slot.
	now atomic.Int64
	tab atomic.Pointer[table[K]]
	// Under mu:
	used  int // live entries plus tombstones in tab
	live  int // live entries in tab
	lists [][]uint32
	spare []uint32 // an emptied list, reused so a step does not allocate
	_     [40]byte // keep shards on separate cache lines
}

// table is an open-addressing hash table with linear probing and its entries
// stored inline: a key costs one slot, no allocation and no pointer of its
// own. A slot's key is written once: removal leaves a tombstone that only the
// same key may revive, and only a rehash, into a new table, reclaims it, so a
// lock-free reader never sees a key change under it.
type table[K comparable] struct {
	entries []entry[K]
	// frozen is set before a rehash copies the entries. A Touch that stored
	// into a frozen table may have been missed by the copy and redoes itself
	// under the lock.
	frozen atomic.Bool
}

// entry is one tracked key; key is written before ttl publishes the entry.
//
// word holds deadline<<1 | idled: the deadline is the step that reports the
// key offline, idled says OnIdle fired since the deadline last moved; 0 once
// the key is removed or expired. Touch only raises the deadline, by CAS, and a
// step claims an expiry by CAS, so a Touch racing an expiry either moves the
// deadline first or finds 0 and adds the key afresh.
//
// lists holds, per ring slot, the indexes of the entries to check when the
// cursor reaches that slot; an index is stale, and skipped, when its entry's
// next check (meta) is another step. Invariant: a live entry's next check
// comes at or before min(its deadline, its next idle step). A Touch only moves
// both later, so a keepalive never has to move the entry.
type entry[K comparable] struct {
	key  K
	word atomic.Uint64
	ttl  atomic.Uint32 // steps from a touch to the deadline; ttlEmpty or ttlGone when not live
	meta atomic.Uint32 // tag<<24 | (step of the next check)&atMask
}

func live(ttl uint32) bool { return ttl != ttlEmpty && ttl != ttlGone }

// home returns the first slot to probe for hash h; the table size need not be
// a power of two.
func home(h uint64, n int) int {
	return int((uint64(uint32(h>>hashBits)) * uint64(n)) >> 32)
}

func tag(h uint64) uint32 { return uint32(h>>56) << tagShift }

// find returns the index of key's live entry in tb, or -1. It takes no lock.
func (tb *table[K]) find(key K, h uint64) int {
	n := len(tb.entries)
	if n == 0 {
		return -1
	}
	tg := tag(h)
	for i := home(h, n); ; {
		e := &tb.entries[i]
		ttl := e.ttl.Load()
		if ttl == ttlEmpty {
			return -1
		}
		if ttl != ttlGone && e.meta.Load()&^atMask == tg && e.key == key {
			return i
		}
		if i++; i == n {
			i = 0
		}
	}
}

// insert puts key, known to be absent, in the table with its deadline and
// returns the table and index; the caller holds mu and schedules the entry
// next, before anyone can scan it.
func (s *shard[K]) insert(key K, h uint64, ttl uint32, deadline int64, seed maphash.Seed, slots int64) (*table[K], int) {
	tb := s.tab.Load()
	if tb == nil || (s.used+1)*16 > len(tb.entries)*maxLoad {
		tb = s.rehash(seed, slots)
	}
	n, tg := len(tb.entries), tag(h)
	i := home(h, n)
	for {
		e := &tb.entries[i]
		switch e.ttl.Load() {
		case ttlEmpty:
			e.key = key
			e.meta.Store(tg)
			e.word.Store(uint64(deadline) << 1)
			e.ttl.Store(ttl) // publishes the entry to lock-free readers
			s.used++
			s.live++
			return tb, i
		case ttlGone:
			// The key's own tombstone, from an expiry or a Remove: revive it.
			// Its key does not change, so a lock-free reader is unaffected,
			// and a reconnecting user does not leave a tombstone behind.
			if e.meta.Load()&^atMask == tg && e.key == key {
				e.word.Store(uint64(deadline) << 1)
				e.ttl.Store(ttl)
				s.live++
				return tb, i
			}
		}
		if i++; i == n {
			i = 0
		}
	}
}

// drop ends entry i of tb, a live entry, leaving a tombstone; the caller
// holds mu.
func (s *shard[K]) drop(tb *table[K], i int) {
	e := &tb.entries[i]
	e.word.Store(0)
	e.ttl.Store(ttlGone)
	s.live--
}

// wasteful reports whether a rehash would give memory back: the table is
// mostly empty after churn, or its tombstones outnumber 1/16 of the live
// entries. A tombstone keeps its key, for lock-free readers and for the
// key's return, and with it whatever the key points to: a closed
// connection's state, when the keys are connections. Growth happens above
// 81% load, shrinking below 1/8, so the two never alternate; a step that
// expires a slot's share of keys (1/31 by default), which come back as
// the same keys, stays under the tombstone bound.
func (s *shard[K]) wasteful() bool {
	tb := s.tab.Load()
	if tb == nil {
		return false
	}
	return len(tb.entries) > 8*minTable && s.live*8 < len(tb.entries) ||
		s.used-s.live > s.live/16+minTable
}

// rehash copies the live entries to a new table about 2.25 times their
// number and rebuilds the slot lists, dropping tombstones and stale indexes;
// the load stays between 44% and 81%. The caller holds mu, and no step is
// under way, so every live entry's next check lies within the coming turn.
func (s *shard[K]) rehash(seed maphash.Seed, slots int64) *table[K] {
	old := s.tab.Load()
	var src []entry[K]
	if old != nil {
		old.frozen.Store(true)
		src = old.entries
	}
	count := 0
	for i := range src {
		if live(src[i].ttl.Load()) {
			count++
		}
	}
	tb := &table[K]{entries: make([]entry[K], max(minTable, count*2+count/4))}
	for i := range s.lists {
		s.lists[i] = s.lists[i][:0]
	}
	now := s.now.Load()
	n := len(tb.entries)
	for j := range src {
		o := &src[j]
		ttl := o.ttl.Load()
		if !live(ttl) {
			continue
		}
		i := home(maphash.Comparable(seed, o.key), n)
		for tb.entries[i].ttl.Load() != ttlEmpty {
			if i++; i == n {
				i = 0
			}
		}
		e := &tb.entries[i]
		e.key = o.key
		e.meta.Store(o.meta.Load())
		e.word.Store(o.word.Load())
		e.ttl.Store(ttl)
		ahead := int64((o.meta.Load() - uint32(now)) & atMask)
		if ahead == 0 || ahead > slots {
			ahead = 1 // cannot happen; an early check is always safe
		}
		s.schedule(tb, i, now+ahead, slots)
	}
	s.used, s.live = count, count
	s.tab.Store(tb)
	return tb
}

// schedule sets the next check of entry i to step at, or to the step that
// reaches at's slot first when at is more than a turn ahead, and puts the
// entry in that slot's list. Step k checks slot (k-1) mod Slots: after k
// steps the cursor is at k mod Slots, and a Touch, due at step k+Slots, lands
// in slot (k-1) mod Slots, just behind the cursor, reached last.
func (s *shard[K]) schedule(tb *table[K], i int, at, slots int64) {
	now := s.now.Load()
	at = now + 1 + max(at-now-1, 0)%slots
	e := &tb.entries[i]
	e.meta.Store(e.meta.Load()&^atMask | uint32(at)&atMask)
	l := (at - 1) % slots
	s.lists[l] = append(s.lists[l], uint32(i))
}
