package transport_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Shutdown returns by its context's deadline whatever a hook does: an
// OnMessage waiting on its connection's context is let go, and one that
// ignores it does not hold Shutdown, which finishes the rest when it
// returns.
func TestShutdownReturnsByItsDeadlineWhateverAHookDoes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		honours bool
	}{
		{"a hook that waits on its context", true},
		{"a hook that ignores its context", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entered := make(chan struct{}, 1)
			release := make(chan struct{})
			returned := make(chan struct{})
			cfg := testConfig()
			cfg.CloseTimeout = time.Hour // only the context can end the wait
			cfg.OnMessage = func(ctx context.Context, uid, typ string, frame json.RawMessage) error {
				defer close(returned)
				entered <- struct{}{}
				if tc.honours {
					<-ctx.Done()
					return ctx.Err()
				}
				<-release
				return nil
			}
			s := startServer(t, cfg)
			hub, reg := s.hub, s.reg
			var letGo sync.Once
			free := func() { letGo.Do(func() { close(release) }) }
			defer free()
			ws := s.dialRaw(t, "uid=alice", nil)
			send(t, ws, `{"type":"cursor","channel":"lobby"}`)
			select {
			case <-entered:
			case <-time.After(waitLong):
				t.Fatal("OnMessage not called")
			}

			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- hub.Shutdown(ctx) }()
			select {
			case err := <-done:
				require.ErrorIs(t, err, context.DeadlineExceeded)
			case <-time.After(waitLong):
				t.Fatal("Shutdown outlived its context")
			}
			if tc.honours {
				select {
				case <-returned:
				case <-time.After(waitLong):
					t.Fatal("the hook's context was not cancelled")
				}
				s.waitMetric(t, "presenced_connections", nil, 0)
				return
			}
			select {
			case <-returned:
				t.Fatal("the hook returned before it was let go")
			default:
			}
			assert.Equal(t, 1.0, metric(t, reg, "presenced_connections", nil), "the held connection ends when its hook returns")
			free()
			s.waitMetric(t, "presenced_connections", nil, 0)
			require.NoError(t, hub.Shutdown(context.Background()), "the shutdown finished once the hook returned")
		})
	}
}
