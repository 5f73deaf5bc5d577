// Package sortedset keeps a set of strings in order, for listings that must
// not sort the whole set on every request.
package sortedset

import (
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
	blk := slices.Insert(s.blocks[b], i, x)
	if len(blk) > blockSize {
		// Split in two halves, each with room to grow.
		half := len(blk) / 2
		hi := append(make([]string, 0, blockSize), blk[half:]...)
		blk = blk[:half:half]
		lo := append(make([]string, 0, blockSize), blk...)
		s.blocks[b] = lo
		s.blocks = slices.Insert(s.blocks, b+1, hi)
	} else {
		s.blocks[b] = blk
	}
	s.n++
	return true
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
