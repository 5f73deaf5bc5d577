package tracker

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

const (
	ttlEmpty = 0             // a table slot never used since the last rehash
	ttlGone  = ^uint32(0)    // a tombstone: the key was removed or expired
	maxTTL   = 1<<32 - 2     // the longest timeout, in steps
	atMask   = 1<<24 - 1     // entry.meta: the low 24 bits of the step of the next check
	minTable = 8             // the smallest table a shard allocates
	maxLoad  = 13            // rehash when used slots exceed maxLoad/16 of the table
	tagShift = 24            // entry.meta: the high 8 bits are a tag of the key's hash
	hashBits = 6             // low bits of a key's hash pick the shard
	nShards  = 1 << hashBits // shards of the key space
)

// shard is one stripe of the key space with its own lock, its own hash table
// of entries and its own copy of the ring's slot lists.
//
// Lock order: shard.mu, then dispatcher.mu; never the reverse.
type shard[K comparable] struct {
	mu sync.RWMutex
	// now is the step this shard has reached. A step advances it under the
	// write lock, so a Touch under the read lock sees one value from start to
	// end and concurrent touches of a key compute the same deadline.
	now int64
	// tab is an open-addressing table with linear probing, its entries stored
	// inline: one key costs one table slot, no allocation and no pointer.
	tab  []entry[K]
	used int // live entries plus tombstones
	// lists holds, per ring slot, indexes into tab of the entries to check
	// when the cursor reaches that slot. An index is stale when its entry's
	// next check (entry.meta) is another step; stale indexes are skipped.
	lists [][]uint32
	spare []uint32 // an emptied list, reused so a step does not allocate
	_     [24]byte // keep shards on separate cache lines
}

// entry is one tracked key. word holds deadline<<1 | idled: the deadline is
// the step that reports the key offline, idled says OnIdle has fired since
// the deadline last moved. Only word changes under the read lock (a Touch);
// everything else changes under the write lock.
//
// Invariant: a live entry's next check, the step in meta, comes at or before
// min(its deadline, its next idle step). A Touch only moves both later, so a
// keepalive never has to move the entry.
type entry[K comparable] struct {
	key  K
	word atomic.Uint64
	ttl  uint32 // steps from a touch to the deadline; ttlEmpty or ttlGone when not live
	meta uint32 // tag<<24 | (step of the next check)&atMask
}

func (e *entry[K]) live() bool { return e.ttl != ttlEmpty && e.ttl != ttlGone }

// home returns the first table slot to probe for hash h; the table size need
// not be a power of two.
func home(h uint64, n int) int {
	return int((uint64(uint32(h>>hashBits)) * uint64(n)) >> 32)
}

func tag(h uint64) uint32 { return uint32(h>>56) << tagShift }

// find returns the index of key's live entry, or -1. Callers hold s.mu.
func (s *shard[K]) find(key K, h uint64) int {
	n := len(s.tab)
	if n == 0 {
		return -1
	}
	tg := tag(h)
	for i := home(h, n); ; {
		e := &s.tab[i]
		if e.ttl == ttlEmpty {
			return -1
		}
		if e.meta&^atMask == tg && e.ttl != ttlGone && e.key == key {
			return i
		}
		if i++; i == n {
			i = 0
		}
	}
}

// insert puts key, known to be absent, in the table and returns its index.
// Callers hold the write lock and schedule the entry next.
func (s *shard[K]) insert(key K, h uint64, ttl uint32, seed maphash.Seed, slots int64) int {
	if (s.used+1)*16 > len(s.tab)*maxLoad {
		s.rehash(seed, slots)
	}
	n := len(s.tab)
	i := home(h, n)
	for s.tab[i].live() {
		if i++; i == n {
			i = 0
		}
	}
	e := &s.tab[i]
	if e.ttl == ttlEmpty {
		s.used++
	}
	e.key, e.ttl, e.meta = key, ttl, tag(h)
	return i
}

// drop turns entry i into a tombstone.
func (s *shard[K]) drop(i int) {
	e := &s.tab[i]
	var zero K
	e.key, e.ttl = zero, ttlGone // let the key's memory go
	e.word.Store(0)
}

// rehash moves the live entries to a table about 2.25 times their number
// and rebuilds the slot lists, dropping tombstones and stale indexes. The load
// stays between 44% and 81%, a million keys cost about 1.6 table slots each.
// It is never called during a step, so every live entry's next check lies
// within the coming turn of the ring.
func (s *shard[K]) rehash(seed maphash.Seed, slots int64) {
	live := 0
	for i := range s.tab {
		if s.tab[i].live() {
			live++
		}
	}
	old := s.tab
	s.tab = make([]entry[K], max(minTable, live*2+live/4))
	s.used = live
	for i := range s.lists {
		s.lists[i] = s.lists[i][:0]
	}
	n := len(s.tab)
	for j := range old {
		o := &old[j]
		if !o.live() {
			continue
		}
		i := home(maphash.Comparable(seed, o.key), n)
		for s.tab[i].ttl != ttlEmpty {
			if i++; i == n {
				i = 0
			}
		}
		e := &s.tab[i]
		e.key, e.ttl, e.meta = o.key, o.ttl, o.meta
		e.word.Store(o.word.Load())
		ahead := int64((o.meta - uint32(s.now)) & atMask)
		if ahead == 0 || ahead > slots {
			ahead = 1 // cannot happen; an early check is always safe
		}
		s.schedule(i, s.now+ahead, slots)
	}
}

// schedule sets the next check of entry i to step at, or to the step that
// reaches at's slot first when at is more than a turn ahead, and puts the
// entry in that slot's list. Step k checks slot (k-1) mod Slots: after k
// steps the cursor is at k mod Slots, and a Touch, due at step k+Slots, lands
// in slot (k-1) mod Slots, just behind the cursor, reached last.
func (s *shard[K]) schedule(i int, at, slots int64) {
	at = s.now + 1 + max(at-s.now-1, 0)%slots
	e := &s.tab[i]
	e.meta = e.meta&^atMask | uint32(at)&atMask
	l := (at - 1) % slots
	s.lists[l] = append(s.lists[l], uint32(i))
}
