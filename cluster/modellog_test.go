package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/presenced/presenced/presence"
)

// The model's users are members of channels, so that its histories reach
// the log's order across shards: a user's records and its memberships are
// in different shards.
var modelChannelNames = []string{"c0", "c1", "c2"}

// modelChannels are the channels user i is in while connected: one, or two
// for even users.
func modelChannels(i int) []string {
	chs := []string{modelChannelNames[i%3]}
	if i%2 == 0 {
		chs = append(chs, modelChannelNames[(i+1)%3])
	}
	return chs
}

// A modelSnap is what a backend would read when the cluster settled: the
// online users and every channel's members, at one cursor.
type modelSnap struct {
	cursor  string
	users   []string
	members map[string][]string
}

// state is the whole state a replay from the snapshot starts with.
func (s modelSnap) state() *logState {
	st := newWholeLogState()
	for _, u := range s.users {
		st.online[u] = true
	}
	for ch, ms := range s.members {
		for _, u := range ms {
			st.member(ch)[u] = true
			st.in[u]++
		}
	}
	return st
}

// snapshotOnce takes a snapshot of the settled cluster, waiting for Redis
// to give one.
func (m *modelRun) snapshotOnce() error {
	deadline := time.Now().Add(testWait)
	for n := len(m.snaps); len(m.snaps) == n; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("no snapshot in %v", testWait)
		}
		m.snapshot()
	}
	return nil
}

// snapshot keeps a snapshot of the settled cluster, unless Redis refuses
// one (its nodes are still putting back what it lost) or an edge came
// between the listings.
func (m *modelRun) snapshot() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	e := m.nodes[0].Engine
	_, users, cursor, err := e.UsersAt(ctx, modelUsers)
	if err != nil {
		return
	}
	snap := modelSnap{cursor: cursor, users: users, members: map[string][]string{}}
	for _, ch := range modelChannelNames {
		_, members, c, err := e.MembersAt(ctx, ch, "", modelUsers)
		if err != nil || c != cursor {
			return
		}
		snap.members[ch] = members
	}
	m.snaps = append(m.snaps, snap)
}

// truth is who holds a connection on some node, and each channel's
// members by the same rule.
func (m *modelRun) truth() ([]string, map[string][]string) {
	var online []string
	members := map[string][]string{}
	for i, uid := range m.users {
		total := 0
		for _, c := range m.conns {
			total += c[uid]
		}
		if total == 0 {
			continue
		}
		online = append(online, uid)
		for _, ch := range modelChannels(i) {
			members[ch] = append(members[ch], uid)
		}
	}
	for _, ms := range members {
		slices.Sort(ms)
	}
	return online, members
}

// checkLog checks the log of edges as a backend that kept its state from
// it would: from the start (when Redis never lost its data), or else from
// the oldest snapshot the log still answers for, each edge is one the state
// allows (see logState) and the state at the end is the truth.
func (m *modelRun) checkLog() error {
	online, members := m.truth()
	e := m.nodes[0].Engine
	ctx := context.Background()
	deadline := time.Now().Add(testWait)
	for {
		wrong := ""
		for _, ch := range modelChannelNames {
			_, got, err := e.Members(ctx, ch, "", modelUsers)
			if err != nil || !slices.Equal(got, members[ch]) {
				wrong = fmt.Sprintf("redis has %v in %s (%v), the truth %v", got, ch, err, members[ch])
				break
			}
		}
		if wrong == "" {
			break
		}
		if time.Now().After(deadline) {
			return errors.New(wrong)
		}
		time.Sleep(50 * time.Millisecond)
	}
	starts := m.snaps
	if !m.lost {
		starts = append([]modelSnap{{members: map[string][]string{}}}, starts...)
	}
	_, _, end, err := e.UsersAt(ctx, 0)
	if err != nil {
		return fmt.Errorf("the log's end: %w", err)
	}
	for i, snap := range starts {
		edges, err := replayLog(e, snap.cursor, end)
		if errors.Is(err, presence.ErrCursorGone) {
			continue
		}
		if err != nil {
			return err
		}
		st := snap.state()
		for _, ed := range edges {
			if err := st.apply(ed); err != nil {
				var mine []string
				for _, x := range edges {
					if x.UID == ed.UID {
						mine = append(mine, edgeText(x))
					}
				}
				return fmt.Errorf("from start %d of %d: %w; its edges: %s", i+1, len(starts), err, strings.Join(mine, ", "))
			}
		}
		if got := st.users(); !slices.Equal(got, online) {
			return fmt.Errorf("from start %d, the log makes %v online, the truth %v", i+1, got, online)
		}
		for _, ch := range modelChannelNames {
			if got := trueKeys(st.member(ch)); !slices.Equal(got, members[ch]) {
				return fmt.Errorf("from start %d, the log makes %v members of %s, the truth %v", i+1, got, ch, members[ch])
			}
		}
		m.replayed = fmt.Sprintf("%d edges replayed from start %d of %d", len(edges), i+1, len(starts))
		return nil
	}
	return fmt.Errorf("the log answers from none of %d starts", len(starts))
}

// replayLog reads the edges after cursor until it reaches end in every
// shard, asking once at least: the log may no longer answer from cursor.
func replayLog(e *Engine, cursor, end string) ([]presence.Edge, error) {
	stop, err := decodeCursor(end, len(e.keys))
	if err != nil {
		return nil, err
	}
	var edges []presence.Edge
	deadline := time.Now().Add(2 * testWait)
	for asked := false; ; asked = true {
		if asked {
			cur, err := decodeCursor(cursor, len(e.keys))
			if err != nil {
				return nil, err
			}
			behind := false
			for i, p := range cur.pos {
				behind = behind || p.less(stop.pos[i])
			}
			if !behind {
				return edges, nil
			}
		}
		page, next, err := e.Edges(context.Background(), cursor, 100)
		if err != nil {
			return nil, err
		}
		if len(page) == 0 {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("the replay did not reach the log's end in %v", 2*testWait)
			}
			time.Sleep(20 * time.Millisecond) // the last entries settle
		}
		edges, cursor = append(edges, page...), next
	}
}
