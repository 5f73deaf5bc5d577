package tracker

import (
	"slices"
	"sync"
)

// drain waits until every queued callback has run.
func (t *Tracker[K]) drain() {
	d := &t.events
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.running {
		d.cond.Wait()
	}
}

// recorder collects callback events in the order they were called.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(kind, key string) {
	r.mu.Lock()
	r.events = append(r.events, kind+":"+key)
	r.mu.Unlock()
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	evs := r.events
	r.events = nil
	return evs
}

func (r *recorder) config(slots int) Config[string] {
	return Config[string]{
		Slots:     slots,
		OnOnline:  func(k string) { r.add("online", k) },
		OnIdle:    func(k string) { r.add("idle", k) },
		OnOffline: func(k string) { r.add("offline", k) },
	}
}

func sorted(keys []string) []string {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	return keys
}
