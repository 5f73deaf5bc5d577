package presence

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
)

// orderEngine is the in-memory engine that checks, as the changes arrive,
// that they come one at a time and in an order the Node could have made
// them in: a user's set comes while the engine counts the user online, a
// membership never counts more connections than its user has. A set
// applied after the close that followed it, or a user's count applied
// before the leaves made ahead of it, breaks one of them.
type orderEngine struct {
	Engine
	inside atomic.Int32

	mu       sync.Mutex
	users    map[string]int
	members  map[membership]int
	applied  int
	problems []string
}

func (e *orderEngine) Apply(c Change) {
	if e.inside.Add(1) != 1 {
		e.fail("Apply called while another Apply runs: %+v", c)
	}
	defer e.inside.Add(-1)
	e.mu.Lock()
	e.applied++
	switch c.Kind {
	case ChangeUser:
		e.users[c.UID] = c.N
		for m, n := range e.members {
			if m.uid == c.UID && n > c.N {
				e.problems = append(e.problems, fmt.Sprintf("%s has %d connection(s) but %d in %s", c.UID, c.N, n, m.channel))
			}
		}
	case ChangeMember:
		e.members[membership{c.Channel, c.UID}] = c.N
		if c.N > e.users[c.UID] {
			e.problems = append(e.problems, fmt.Sprintf("%s has %d connection(s) in %s but %d in all", c.UID, c.N, c.Channel, e.users[c.UID]))
		}
	case ChangeSet:
		if e.users[c.UID] == 0 {
			e.problems = append(e.problems, fmt.Sprintf("a set of %s came while it is offline", c.UID))
		}
	}
	e.mu.Unlock()
	e.Engine.Apply(c)
}

func (e *orderEngine) fail(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.problems = append(e.problems, fmt.Sprintf(format, args...))
}

// A user's record changes and its counts reach the Engine in the order the
// Node made them, whichever goroutines made them: here each connection's
// frames race its own close (as a reader's frames race a timeout or a
// DisconnectUser), and several connections of one user race each other.
func TestChangesReachTheEngineInTheOrderMade(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	eng := &orderEngine{Engine: NewMemoryEngine(), users: map[string]int{}, members: map[membership]int{}}
	n := newNode(t, Config{Engine: eng})
	ctx := context.Background()
	modes := []string{protocol.ModeInvisible, protocol.ModeDND, protocol.ModeOnline}
	channels := []string{"a", "b"}

	var wg sync.WaitGroup
	for w := range 8 {
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		uid := fmt.Sprintf("u%d", w%3) // three users, several workers each
		wg.Go(func() {
			for range 200 {
				c := &client{name: uid}
				if err := n.Connect(ctx, c, uid, nil); err != nil {
					t.Errorf("connect: %v", err)
					return
				}
				// The close races the frames below, as a timeout would.
				closed := make(chan struct{})
				yields := rng.IntN(4)
				go func() {
					defer close(closed)
					for range yields {
						time.Sleep(0) // let the frames start first, sometimes
					}
					n.Disconnect(c)
				}()
				for range 1 + rng.IntN(4) {
					switch ch := channels[rng.IntN(len(channels))]; rng.IntN(3) {
					case 0:
						_ = n.Set(c, protocol.Set{Mode: modes[rng.IntN(len(modes))]})
					case 1:
						_ = n.Join(ctx, c, ch)
					default:
						_ = n.Leave(c, ch)
					}
				}
				<-closed
			}
		})
	}
	wg.Wait()

	eng.mu.Lock()
	defer eng.mu.Unlock()
	require.Empty(t, eng.problems, "seed %d", seed)
	require.Greater(t, eng.applied, 1000, "the workers made changes")
	for uid, c := range eng.users {
		require.Zero(t, c, "%s is offline at the end", uid)
	}
}
