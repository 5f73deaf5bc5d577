package presence

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lateEngine is the in-memory engine made to hand on departures late, as an
// engine that writes in the background does: here, only at Withdraw.
type lateEngine struct {
	Engine
	mu          sync.Mutex
	late        []func()
	withdrawals int
}

func (e *lateEngine) later(f func()) {
	e.mu.Lock()
	e.late = append(e.late, f)
	e.mu.Unlock()
}

// Apply holds back the changes that end a count.
func (e *lateEngine) Apply(c Change) {
	if (c.Kind == ChangeUser || c.Kind == ChangeMember) && c.N == 0 {
		e.later(func() { e.Engine.Apply(c) })
		return
	}
	e.Engine.Apply(c)
}

func (e *lateEngine) Withdraw(context.Context) error {
	e.mu.Lock()
	late := e.late
	e.late = nil
	e.withdrawals++
	e.mu.Unlock()
	for _, f := range late {
		f()
	}
	return nil
}

// The edges a Withdrawer makes as the Node withdraws reach OnPresence and
// OnEdges before Close returns, once each; those made after Close are
// dropped.
func TestWithdrawHandsTheLastEdgesToTheCallbacks(t *testing.T) {
	eng := &lateEngine{Engine: NewMemoryEngine()}
	var (
		mu    sync.Mutex
		heard []string
		edges []string
	)
	n := newNode(t, Config{Engine: eng,
		OnPresence: func(uid string, online bool) {
			mu.Lock()
			defer mu.Unlock()
			heard = append(heard, fmt.Sprintf("%s %v", uid, online))
		},
		OnEdges: func(es []Edge) {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range es {
				edges = append(edges, strings.TrimSpace(e.Kind.String()+" "+e.UID+" "+e.Channel))
			}
		}})
	alice := connect(t, n, "alice", "lobby")
	bob := connect(t, n, "bob", "lobby")
	n.Shutdown()
	n.Disconnect(alice)
	n.Disconnect(bob)
	require.NoError(t, n.Withdraw(context.Background()))
	n.Close()
	assert.Equal(t, 1, eng.withdrawals)
	eng.Engine.Apply(Change{Kind: ChangeUser, UID: "carol", N: 1}) // after Close: nobody hears it

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"alice true", "bob true", "alice false", "bob false"}, heard)
	assert.Equal(t, []string{"online alice", "join alice lobby", "online bob", "join bob lobby",
		"leave alice lobby", "offline alice", "leave bob lobby", "offline bob"}, edges)
}

// Withdraw with an engine that is no Withdrawer hands it the changes made
// so far, and nothing else.
func TestWithdrawWithoutAWithdrawer(t *testing.T) {
	var (
		mu    sync.Mutex
		heard []string
	)
	n := newNode(t, Config{OnPresence: func(uid string, online bool) {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, fmt.Sprintf("%s %v", uid, online))
	}})
	alice := connect(t, n, "alice")
	n.Shutdown()
	n.Disconnect(alice)
	require.NoError(t, n.Withdraw(context.Background()))
	n.Close()
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"alice true", "alice false"}, heard)
}
