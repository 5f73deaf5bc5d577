package transport_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

// lateEngine is the in-memory engine made to hand on departures late, as an
// engine that writes to a shared store in the background does: here, only
// when the Node withdraws.
type lateEngine struct {
	presence.Engine
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
func (e *lateEngine) Apply(c presence.Change) {
	if (c.Kind == presence.ChangeUser || c.Kind == presence.ChangeMember) && c.N == 0 {
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

// Shutdown has an engine that makes its edges late withdraw before the
// callbacks stop: OnPresence and OnEdges hear every user of the Hub go
// offline and leave its channel, once, before Shutdown returns.
func TestShutdownWithdrawsBeforeTheCallbacksStop(t *testing.T) {
	eng := &lateEngine{Engine: presence.NewMemoryEngine()}
	var (
		mu    sync.Mutex
		heard []string
		edges []string
	)
	cfg := testConfig()
	cfg.Engine = eng
	cfg.OnPresence = func(uid string, online bool) {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, fmt.Sprintf("%s %v", uid, online))
	}
	cfg.OnEdges = func(es []presence.Edge) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range es {
			edges = append(edges, strings.TrimSpace(e.Kind.String()+" "+e.UID+" "+e.Channel))
		}
	}
	s := startServer(t, cfg)
	for _, uid := range []string{"alice", "bob"} {
		ws, _ := s.dialIn(t, uid, "lobby")
		go func() { // answers the close
			for {
				if _, _, err := ws.NextReader(); err != nil {
					return
				}
			}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	require.NoError(t, s.hub.Shutdown(ctx))
	assert.Equal(t, 1, eng.withdrawals)

	mu.Lock()
	defer mu.Unlock()
	assert.ElementsMatch(t, []string{"alice true", "bob true", "alice false", "bob false"}, heard)
	assert.ElementsMatch(t, []string{"online alice", "join alice lobby", "online bob", "join bob lobby",
		"leave alice lobby", "offline alice", "leave bob lobby", "offline bob"}, edges)
}
