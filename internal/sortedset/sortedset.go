// Package sortedset keeps a set of strings in order, for listings that must
// not sort the whole set on every request.
package sortedset

import (
	"iter"
	"slices"
	"strings"
)

// blockSize bounds a block: an insert or delete moves at most this many
// strings, and a listing of n costs O(log blocks + n).
const blockSize = 512

// Set is an ordered set of strings, kept in sorted blocks. The zero value is
// an empty set. It is not safe for concurrent use.
type Set struct {
	blocks [][]string // each sorted and non-empty; all of block i < all of block i+1
	n      int
}

// Len returns the number of strings in the set.
func (s *Set) Len() int { return s.n }

// find returns the block where x is or belongs, and x's place in it.
func (s *Set) find(x string) (b, i int, found bool) {
	b, _ = slices.BinarySearchFunc(s.blocks, x, func(blk []string, x string) int {
		return strings.Compare(blk[len(blk)-1], x)
	})
	if b == len(s.blocks) {
		b-- // after every block's last: the end of the last block
	}
	i, found = slices.BinarySearch(s.blocks[b], x)
	return b, i, found
}

// Has reports whether x is in the set.
func (s *Set) Has(x string) bool {
	if s.n == 0 {
		return false
	}
	_, _, found := s.find(x)
	return found
}

// Add puts x in the set and reports whether it was absent.
func (s *Set) Add(x string) bool {
	if s.n == 0 {
		s.blocks = [][]string{{x}}
		s.n = 1
		return true
	}
	b, i, found := s.find(x)
	if found {
		return false
	}
	blk := s.blocks[b]
	if len(blk) == cap(blk) {
		blk = withRoom(blk)
	}
	blk = slices.Insert(blk, i, x)
	if len(blk) > blockSize {
		half := len(blk) / 2
		s.blocks[b] = withRoom(blk[:half])
		s.blocks = slices.Insert(s.blocks, b+1, withRoom(blk[half:]))
	} else {
		s.blocks[b] = blk
	}
	s.n++
	return true
}

// withRoom returns a copy of blk with room for an eighth more. The blocks
// are most of a set's memory: grown by append's doubling, or split into
// halves of a full block's capacity, they would sit half empty where
// inserts do not come evenly (and most sets grow in a few places).
func withRoom(blk []string) []string {
	out := make([]string, len(blk), len(blk)+len(blk)/8+4)
	copy(out, blk)
	return out
}

// Remove takes x out of the set and reports whether it was there.
func (s *Set) Remove(x string) bool {
	if s.n == 0 {
		return false
	}
	b, i, found := s.find(x)
	if !found {
		return false
	}
	blk := slices.Delete(s.blocks[b], i, i+1)
	s.n--
	switch {
	case len(blk) == 0:
		s.blocks = slices.Delete(s.blocks, b, b+1)
	case len(blk) < blockSize/4 && b+1 < len(s.blocks) && len(blk)+len(s.blocks[b+1]) <= blockSize:
		// Merge a small block into its neighbour, so churn leaves no dust.
		s.blocks[b] = append(blk, s.blocks[b+1]...)
		s.blocks = slices.Delete(s.blocks, b+1, b+2)
	default:
		s.blocks[b] = blk
	}
	if s.n == 0 {
		s.blocks = nil
	}
	return true
}

// First returns up to n of the smallest strings, in order, in a new slice.
func (s *Set) First(n int) []string {
	out := make([]string, 0, min(max(n, 0), s.n))
	for _, blk := range s.blocks {
		if len(out) == cap(out) {
			break
		}
		out = append(out, blk[:min(len(blk), cap(out)-len(out))]...)
	}
	return out
}

// After returns up to n of the strings greater than x, in order, in a new
// slice: a page of a listing that goes on from x. It costs O(log blocks + n).
func (s *Set) After(x string, n int) []string {
	out := make([]string, 0, min(max(n, 0), s.n))
	if len(out) == cap(out) {
		return out
	}
	for v := range s.Above(x) {
		out = append(out, v)
		if len(out) == cap(out) {
			break
		}
	}
	return out
}

// Above yields the strings greater than x, in order. The set must not change
// while it runs.
func (s *Set) Above(x string) iter.Seq[string] {
	return func(yield func(string) bool) {
		if s.n == 0 {
			return
		}
		b, i, found := s.find(x)
		if found {
			i++
		}
		for ; b < len(s.blocks); b, i = b+1, 0 {
			for _, v := range s.blocks[b][i:] {
				if !yield(v) {
					return
				}
			}
		}
	}
}
