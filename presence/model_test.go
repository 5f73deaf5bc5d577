package presence

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// model is the random model the model checks share: connections that
// connect, join, leave, go away and disconnect at random, each with what it
// joined and is, and what it believes of each channel it joined, built from
// its snapshots and diffs alone. A check draws its own mix of operations.
type model struct {
	t        *testing.T
	n        *Node
	rng      *rand.Rand
	users    int // uids are u0 to u<users-1>
	channels []string
	live     []*modelConn
}

type modelConn struct {
	c      *client
	uid    string
	away   bool
	joined map[string]bool
	view   map[string]map[string]bool // channel -> member -> away, as it believes
}

func newModel(t *testing.T, n *Node, rng *rand.Rand, users int, channels ...string) *model {
	return &model{t: t, n: n, rng: rng, users: users, channels: channels}
}

func (m *model) channel() string { return m.channels[m.rng.IntN(len(m.channels))] }

func (m *model) any() *modelConn { return m.live[m.rng.IntN(len(m.live))] }

// connect connects a random user, joined to a random channel.
func (m *model) connect() {
	uid := fmt.Sprintf("u%d", m.rng.IntN(m.users))
	s := &modelConn{c: &client{name: uid}, uid: uid, joined: map[string]bool{}, view: map[string]map[string]bool{}}
	ch := m.channel()
	require.NoError(m.t, m.n.Connect(context.Background(), s.c, uid, []string{ch}))
	s.joined[ch] = true
	m.live = append(m.live, s)
}

func (m *model) disconnect() {
	i := m.rng.IntN(len(m.live))
	m.n.Disconnect(m.live[i].c)
	m.live = slices.Delete(m.live, i, i+1)
}

func (m *model) join() {
	s := m.any()
	ch := m.channel()
	require.NoError(m.t, m.n.Join(context.Background(), s.c, ch))
	s.joined[ch] = true
}

func (m *model) leave() {
	s := m.any()
	ch := m.channel()
	require.NoError(m.t, m.n.Leave(s.c, ch))
	delete(s.joined, ch)
}

func (m *model) setActivity() {
	s := m.any()
	s.away = m.rng.IntN(2) == 0
	require.NoError(m.t, m.n.SetActivity(s.c, s.away))
}

// step steps the node and has every live connection take in its frames,
// failing on a diff that contradicts what the connection believed.
func (m *model) step() {
	m.n.Step()
	for _, s := range m.live {
		m.apply(s)
	}
}

func (m *model) apply(s *modelConn) {
	t := m.t
	for _, f := range s.c.take() {
		var msg struct {
			Type, Channel         string
			Members, Away, Active []string
			Joins, Leaves         []string
		}
		require.NoError(t, json.Unmarshal([]byte(f), &msg))
		switch msg.Type {
		case "joined":
			v := map[string]bool{}
			for _, u := range msg.Members {
				v[u] = slices.Contains(msg.Away, u)
			}
			s.view[msg.Channel] = v
		case "left":
			delete(s.view, msg.Channel)
		case "presence":
			v := s.view[msg.Channel]
			require.NotNil(t, v, "diff for a channel not joined: %s", f)
			for _, u := range msg.Joins {
				_, member := v[u]
				require.False(t, member, "repeated join %s: %s", u, f)
				v[u] = false
			}
			for _, u := range msg.Leaves {
				_, member := v[u]
				require.True(t, member, "leave of a non-member %s: %s", u, f)
				delete(v, u)
			}
			for _, u := range msg.Away {
				_, member := v[u]
				require.True(t, member, "away of a non-member %s: %s", u, f)
				require.False(t, v[u] && !slices.Contains(msg.Joins, u), "repeated away %s: %s", u, f)
				v[u] = true
			}
			for _, u := range msg.Active {
				require.True(t, v[u], "active of a member not away %s: %s", u, f)
				v[u] = false
			}
		}
	}
}

// members is who s believes is in ch, sorted.
func (s *modelConn) members(ch string) []string {
	var out []string
	for u := range s.view[ch] {
		out = append(out, u)
	}
	slices.Sort(out)
	return orEmpty(out)
}

// truth is ch's members, each away exactly while all its connections are.
func (m *model) truth(ch string) map[string]bool {
	out := map[string]bool{}
	byUser := map[string][]*modelConn{}
	for _, s := range m.live {
		byUser[s.uid] = append(byUser[s.uid], s)
	}
	for uid, conns := range byUser {
		away, in := true, false
		for _, s := range conns {
			away = away && s.away
			in = in || s.joined[ch]
		}
		if in {
			out[uid] = away
		}
	}
	return out
}
