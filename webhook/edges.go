package webhook

import (
	"context"
	"time"

	"github.com/presenced/presenced/presence"
)

// AddEdges queues a node's presence edges as events, in order: the shape
// of presence.Config.OnEdges (and transport.Config.OnEdges), which hands a
// node the edges it produced once per tick.
func (s *Sender) AddEdges(edges []presence.Edge) {
	evs := make([]Event, len(edges))
	for i, e := range edges {
		evs[i] = EventOf(e)
	}
	s.Add(evs...)
}

// EventOf is the event of an edge, as a POST carries it: the shape a
// replay of the engine's log (presence.EdgeLog) answers in too, so a
// receiver reads both the same way.
func EventOf(e presence.Edge) Event {
	return Event{ID: e.ID, Type: e.Kind.String(), Channel: e.Channel, UID: e.UID, At: e.At.UnixMilli(),
		Info: e.Record.Info, Mode: e.Record.Mode, Note: e.Record.Note}
}

// Drain waits until every event added so far is delivered, while Run runs,
// or until ctx is done: for a server that shuts down and wants the last
// edges (its users going offline) sent first.
func (s *Sender) Drain(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		s.mu.Lock()
		n := s.q.n
		s.mu.Unlock()
		if n == 0 && s.inFlight.Load() == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
