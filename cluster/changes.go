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
//
// Within a round, the records of different shards are written at once, so
// an edge in one shard cannot wait there for another's: waves splits a
// round where one user's records of both kinds meet (see waves).
//
// A record change (a user's info, mode or note; see recordOp) is written
// apart from these, after the changes made before it and before those
// made after it that flip: cut marks where one came, and take splits the
// rounds there into segments.
type changes struct {
	rounds []map[recordKey]record
	last   int // the round of the newest record that flipped or was new
	n      int // records in all rounds
	cuts   []cut
}

// A cut follows the first round rounds, made while the writer had counted
// counted changes: the record changes made then go after those rounds.
type cut struct {
	round   int
	counted int64
}

// A segment is rounds to write one after the other, then the record
// changes made by the time the writer had counted counted changes.
type segment struct {
	rounds  [][]record
	counted int64
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
	if to, ok := c.coalesce(r); ok {
		c.put(to, r)
	}
}

// addRound records rs, changes made together (a round taken and put back,
// or records requeued), each the newest change of its key. Those that
// flip go in one round, the earliest that keeps each after its key's
// earlier flip: split over rounds, one user's online could be written
// after its joins, or its leaves after its offline (see waves).
func (c *changes) addRound(rs []record) {
	to := c.last
	var placed []record
	for _, r := range rs {
		if j, ok := c.coalesce(r); ok {
			to = max(to, j)
			placed = append(placed, r)
		}
	}
	for _, r := range placed {
		c.put(to, r)
	}
}

// coalesce writes r over its key's pending change if r flips nothing from
// it; else it reports the earliest round r may go in: after its key's
// newest, and not before the newest record that flipped.
func (c *changes) coalesce(r record) (to int, ok bool) {
	j := c.newest(r.key())
	if j >= 0 && !c.rounds[j][r.key()].flips(r) {
		c.rounds[j][r.key()] = r
		return 0, false
	}
	return max(j+1, c.last), true
}

// newest returns the newest round holding k, or -1.
func (c *changes) newest(k recordKey) int {
	for j := len(c.rounds) - 1; j >= 0; j-- {
		if _, ok := c.rounds[j][k]; ok {
			return j
		}
	}
	return -1
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
func (c *changes) has(k recordKey) bool { return c.newest(k) >= 0 }

// cut marks that a record change came, while the writer had counted
// counted changes: a flip made from now on goes in a round after the
// rounds held now.
func (c *changes) cut(counted int64) {
	if len(c.rounds) == 0 {
		return // nothing for the record change to wait for
	}
	if n := len(c.cuts); n > 0 && c.cuts[n-1].round == len(c.rounds) {
		c.cuts[n-1].counted = counted
		return
	}
	c.cuts = append(c.cuts, cut{len(c.rounds), counted})
	c.last = len(c.rounds)
}

// take returns the rounds, oldest first, split at the cuts, and empties c;
// the last segment holds the rounds after the last cut, and counted, the
// writer's count now. There is always one segment at least.
func (c *changes) take(counted int64) []segment {
	var out []segment
	start := 0
	for _, ct := range append(c.cuts, cut{len(c.rounds), counted}) {
		seg := segment{counted: ct.counted}
		for _, rd := range c.rounds[start:ct.round] {
			var rs []record
			for _, r := range rd {
				rs = append(rs, r)
			}
			seg.rounds = append(seg.rounds, rs)
		}
		out = append(out, seg)
		start = ct.round
	}
	*c = changes{}
	return out
}

// putBack puts segments that were taken and not written before the changes
// made since, each cut where it was.
func (c *changes) putBack(segs []segment) {
	newer := c.take(0)
	last := len(newer) - 1
	for i, seg := range append(segs, newer...) {
		for _, rs := range seg.rounds {
			c.addRound(rs)
		}
		if i != len(segs)+last { // the newest rounds are not cut yet
			c.cut(seg.counted)
		}
	}
}

// waves splits one round's records in two, to write one after the other:
// where a round holds a user record and memberships of the same user, a
// user's records that can make its online (it holds connections) go before
// its memberships, which can make joins, and its memberships, which can
// make leaves, before a user record that can make its offline (no
// connection left). The second wave's calls then carry the log clock of the
// first's replies (see withClock in the scripts), so in the log, as to the
// Relay, a user's online comes before its joins and its leaves before its
// offline, whatever shards they are in. Most rounds have no such user, and
// one wave.
func waves(recs []record) (first, second []record) {
	users := map[string]int{} // uid -> its user record's n
	members := map[string]bool{}
	for _, r := range recs {
		if r.channel == "" {
			users[r.uid] = r.n
		} else {
			members[r.uid] = true
		}
	}
	for _, r := range recs {
		n, both := users[r.uid]
		both = both && members[r.uid]
		// Second: a user record without connections, or a membership of a
		// user whose record has some.
		if both && (r.channel == "") == (n == 0) {
			second = append(second, r)
		} else {
			first = append(first, r)
		}
	}
	return first, second
}
