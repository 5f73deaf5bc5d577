//go:build lockorder

package lockorder

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"sync"
)

// Enabled says whether this build checks the order.
const Enabled = true

// held is the ranks each goroutine holds, by goroutine ID. Slow, and only
// built for tests.
var (
	mu   sync.Mutex
	held = map[uint64][]int{}
	name = map[int]string{}
)

func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

func acquire(rank int, n string) {
	g := goid()
	mu.Lock()
	name[rank] = n
	for _, h := range held[g] {
		if h >= rank {
			hn := name[h]
			mu.Unlock()
			panic(fmt.Sprintf("lockorder: taking %s (rank %d) while holding %s (rank %d)", n, rank, hn, h))
		}
	}
	held[g] = append(held[g], rank)
	mu.Unlock()
}

func release(rank int, _ string) {
	g := goid()
	mu.Lock()
	defer mu.Unlock()
	hs := held[g]
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i] == rank {
			hs = append(hs[:i], hs[i+1:]...)
			break
		}
	}
	// A lock released on another goroutine than took it (sync.Mutex
	// allows it) is forgotten where it was taken at its next check.
	if len(hs) == 0 {
		delete(held, g)
	} else {
		held[g] = hs
	}
}
