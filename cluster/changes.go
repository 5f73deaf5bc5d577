package cluster

// changes are a node's records not yet written to Redis, in rounds that are
// written one after the other. Records that Redis would not tell apart (the
// same key, held or not, all away or not) are coalesced; a flip is never
// coalesced with its undoing: a tab that connects and closes before the next
// write goes in two rounds, so every node sees both edges, and the Relay,
// told of the arrival at once, hears the departure too.
//
// Order: a record never goes in a round before one holding an earlier flip,
// of any key. So a user's leave, made before its offline, is written in the
// same round or an earlier one, and a round hands its edges on in the order
// they happen to one user (see produced). Records that flip nothing go where
// their key already is; they make no edge, so their order does not matter.
type changes struct {
	rounds []map[recordKey]record
	last   int // the round of the newest record that flipped or was new
	n      int // records in all rounds
}

type recordKey struct{ channel, uid string } // channel empty: a user record

func (r record) key() recordKey { return recordKey{r.channel, r.uid} }

// flips reports whether Redis would see r and o differently: one holds the
// key and the other not, or one says every connection is away and the other
// not.
func (r record) flips(o record) bool {
	allAway := func(x record) bool { return x.n > 0 && x.away >= x.n }
	return (r.n > 0) != (o.n > 0) || allAway(r) != allAway(o)
}

// add records r, the newest change of its key.
func (c *changes) add(r record) {
	k := r.key()
	for j := len(c.rounds) - 1; j >= 0; j-- {
		old, ok := c.rounds[j][k]
		if !ok {
			continue
		}
		if !old.flips(r) {
			c.rounds[j][k] = r
			return
		}
		c.put(max(j+1, c.last), r)
		return
	}
	c.put(c.last, r)
}

func (c *changes) put(i int, r record) {
	for len(c.rounds) <= i {
		c.rounds = append(c.rounds, make(map[recordKey]record))
	}
	c.rounds[i][r.key()] = r
	c.last = i
	c.n++
}

// has reports whether a change of k is pending.
func (c *changes) has(k recordKey) bool {
	for _, rd := range c.rounds {
		if _, ok := rd[k]; ok {
			return true
		}
	}
	return false
}

// take returns the rounds, oldest first, and empties c.
func (c *changes) take() [][]record {
	out := make([][]record, len(c.rounds))
	for i, rd := range c.rounds {
		for _, r := range rd {
			out[i] = append(out[i], r)
		}
	}
	*c = changes{}
	return out
}

// putBack puts rounds that were taken and not written before the changes
// made since.
func (c *changes) putBack(rounds [][]record) {
	newer := c.take()
	for _, rs := range append(rounds, newer...) {
		for _, r := range rs {
			c.add(r)
		}
	}
}
