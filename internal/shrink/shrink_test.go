package shrink

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMapGivesMemoryBack(t *testing.T) {
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := heap()
	m := map[int][64]byte{}
	peak := 0
	for i := range 200_000 {
		m[i] = [64]byte{}
	}
	full := heap() - base
	for i := 10; i < 200_000; i++ {
		delete(m, i)
		m = Map(m, &peak)
	}
	assert.Len(t, m, 10)
	for i := range 10 {
		_, ok := m[i]
		assert.True(t, ok, "key %d kept", i)
	}
	after := heap() - base
	assert.Less(t, after, full/20, "heap over the baseline: %d B full, %d B after", full, after)
	runtime.KeepAlive(m)

	small := map[string]int{"a": 1, "b": 2}
	p := 0
	delete(small, "a")
	assert.Equal(t, map[string]int{"b": 2}, Map(small, &p))
}

func TestPutDeletesTheZeroValue(t *testing.T) {
	m := map[string]int{}
	peak := 0
	m = Put(m, "a", 1, &peak)
	assert.Equal(t, map[string]int{"a": 1}, m)
	m = Put(m, "a", 0, &peak)
	assert.Empty(t, m)
}
