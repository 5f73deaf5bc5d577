package sortedset

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The set against a map and a sort, through growth, splits, merges and
// churn down to empty.
func TestAgainstAModel(t *testing.T) {
	var s Set
	model := map[string]bool{}
	rng := rand.New(rand.NewPCG(3, 4))
	check := func() {
		want := make([]string, 0, len(model))
		for k := range model {
			want = append(want, k)
		}
		slices.Sort(want)
		require.Equal(t, len(want), s.Len())
		require.Equal(t, want, s.First(len(want)+5))
		require.Equal(t, want[:min(7, len(want))], s.First(7))
		// Paging through with After ends with the whole set, from any
		// starting point, members and absent strings alike.
		var paged []string
		for page := s.After("", 333); len(page) > 0; page = s.After(page[len(page)-1], 333) {
			require.LessOrEqual(t, len(page), 333)
			paged = append(paged, page...)
		}
		require.True(t, slices.Equal(want, paged), "paged through: %d of %d", len(paged), len(want))
		for _, from := range []string{"", "u", "u10000", "u10000x", "u1", "v"} {
			i, _ := slices.BinarySearch(want, from)
			if i < len(want) && want[i] == from {
				i++
			}
			require.Equal(t, want[i:min(i+5, len(want))], s.After(from, 5), "after %q", from)
			require.True(t, slices.Equal(want[i:], slices.Collect(s.Above(from))), "above %q", from)
		}
		for _, blk := range s.blocks {
			require.NotEmpty(t, blk)
			require.LessOrEqual(t, len(blk), blockSize)
		}
	}
	for round := range 6 {
		adds := 5000
		if round%2 == 1 {
			adds = 100
		}
		for range adds {
			k := fmt.Sprintf("u%05d", rng.IntN(20000))
			require.Equal(t, !model[k], s.Add(k))
			model[k] = true
		}
		check()
		for k := range model {
			if rng.IntN(10) < 8 {
				require.True(t, s.Remove(k))
				require.False(t, s.Has(k))
				delete(model, k)
			} else {
				require.True(t, s.Has(k))
			}
		}
		require.False(t, s.Remove("absent"))
		check()
	}
	for k := range model {
		s.Remove(k)
	}
	assert.Zero(t, s.Len())
	assert.Empty(t, s.First(3))
	assert.Nil(t, s.blocks)
}

// Inserts that come in a few places (here: IDs numbered in order, which
// sort apart) leave the blocks nearly full, not half empty.
func TestBlocksStayFull(t *testing.T) {
	var s Set
	for i := range 15_000 {
		s.Add(fmt.Sprintf("m%d", i))
	}
	room := 0
	for _, blk := range s.blocks {
		room += cap(blk)
	}
	assert.Less(t, float64(room), 1.2*float64(s.Len()), "strings the blocks have room for, %d held", s.Len())
}

func BenchmarkFirst100Of200k(b *testing.B) {
	var s Set
	for i := range 200_000 {
		s.Add(fmt.Sprintf("user-%07d", i*7919%200_000))
	}
	b.ResetTimer()
	for b.Loop() {
		s.First(100)
	}
}

func BenchmarkAddRemoveAt200k(b *testing.B) {
	var s Set
	for i := range 200_000 {
		s.Add(fmt.Sprintf("user-%07d", i))
	}
	b.ResetTimer()
	i := 0
	for b.Loop() {
		k := fmt.Sprintf("user-%07d", i%200_000)
		s.Remove(k)
		s.Add(k)
		i += 7919
	}
}
