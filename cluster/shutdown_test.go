package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/presencedtest"
	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/transport"
)

// hookReceiver is a backend's webhook endpoint shared by several nodes: it
// keeps each event once by its ID (a batch whose answer was lost comes
// again) and counts the repeats.
type hookReceiver struct {
	srv *httptest.Server

	mu      sync.Mutex
	ids     map[string]bool
	counts  map[string]int // "type uid" or "type uid channel" -> events
	last    map[string]int64
	repeats int
}

func newHookReceiver(t *testing.T) *hookReceiver {
	h := &hookReceiver{ids: map[string]bool{}, counts: map[string]int{}, last: map[string]int64{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var batch struct {
			Events []struct {
				ID, Type, UID, Channel string
				At                     int64
			}
		}
		if !assert.NoError(t, json.NewDecoder(r.Body).Decode(&batch)) {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, e := range batch.Events {
			if h.ids[e.ID] {
				h.repeats++
				continue
			}
			h.ids[e.ID] = true
			key := strings.TrimSpace(e.Type + " " + e.UID + " " + e.Channel)
			h.counts[key]++
			h.last[e.Type] = max(h.last[e.Type], e.At)
		}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// every reports whether each uid has at least one event of each kind
// ("online", "join lobby", ...).
func (h *hookReceiver) every(uids []string, kinds ...string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, uid := range uids {
		for _, k := range kinds {
			typ, channel, _ := strings.Cut(k, " ")
			if h.counts[strings.TrimSpace(typ+" "+uid+" "+channel)] == 0 {
				return false
			}
		}
	}
	return true
}

// tally returns how many events of each kind came for uids, and how many
// uids had more than one of a kind.
func (h *hookReceiver) tally(uids []string, kinds ...string) (total map[string]int, twice int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	total = map[string]int{}
	for _, uid := range uids {
		for _, k := range kinds {
			typ, channel, _ := strings.Cut(k, " ")
			n := h.counts[strings.TrimSpace(typ+" "+uid+" "+channel)]
			total[k] += n
			if n > 1 {
				twice++
			}
		}
	}
	return total, twice
}

// lastAt returns the time of the newest event of typ, by the clock that
// made it.
func (h *hookReceiver) lastAt(typ string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return time.UnixMilli(h.last[typ])
}

func (h *hookReceiver) repeated() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.repeats
}

// holdUsers opens one WebSocket per uid on the server at addr, each in the
// lobby, and reads them until they close, answering the server's pings, so
// each user stays online for as long as the server lives.
func holdUsers(t *testing.T, addr string, uids []string) {
	t.Helper()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	jobs := make(chan string)
	for range 8 {
		wg.Go(func() {
			for uid := range jobs {
				ws, resp, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws?channels=lobby&uid="+uid, nil)
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", uid, err))
					mu.Unlock()
					continue
				}
				resp.Body.Close()
				t.Cleanup(func() { ws.Close() })
				go func() {
					for {
						if _, _, err := ws.NextReader(); err != nil {
							return
						}
					}
				}()
			}
		})
	}
	for _, uid := range uids {
		jobs <- uid
	}
	close(jobs)
	wg.Wait()
	require.Empty(t, errs, "dials")
}

// A node stopped with SIGTERM sends its users' leaves and offlines to the
// webhook, once each, before it exits: with presence in Redis as in memory.
func TestSIGTERMSendsTheLastEdgesToTheWebhook(t *testing.T) {
	srv := startRedis(t)
	bin := presencedtest.Build(t)
	const users = 1000
	for _, tc := range []struct{ name, redis string }{{"memory", ""}, {"redis", "redis://" + srv.addr() + "/0"}} {
		t.Run(tc.name, func(t *testing.T) {
			hook := newHookReceiver(t)
			start := func(node string) *presencedtest.Process {
				return presencedtest.Start(t, bin, "-redis", tc.redis, "-node", node, "-slots", "31", "-tick", "100ms",
					"-webhook", hook.srv.URL+"/presence")
			}
			p := start("n1")
			if tc.redis != "" {
				start("n2") // would claim, and send, what n1 left behind
			}
			uids := userIDs("u", users)
			holdUsers(t, p.Addr, uids)
			require.Eventually(t, func() bool { return hook.every(uids, "online", "join lobby") }, processWait,
				20*time.Millisecond, "every user's online and join at the webhook")

			stopped := time.Now()
			require.NoError(t, p.Signal(syscall.SIGTERM))
			assert.Equal(t, 0, p.Wait())
			exited := time.Since(stopped)
			// Delivered before the exit: nothing more can come.
			total, twice := hook.tally(uids, "leave lobby", "offline", "online", "join lobby")
			t.Logf("%s: %d users, SIGTERM to exit %v: %d leaves, %d offlines at the webhook, %d users with an edge twice, %d repeated deliveries",
				tc.name, users, exited.Round(time.Millisecond), total["leave lobby"], total["offline"], twice, hook.repeated())
			assert.Equal(t, users, total["leave lobby"], "leaves")
			assert.Equal(t, users, total["offline"], "offlines")
			assert.Equal(t, users, total["online"], "onlines")
			assert.Equal(t, users, total["join lobby"], "joins")
			assert.Zero(t, twice, "users with an edge twice")
			if tc.redis != "" {
				time.Sleep(3*time.Second + time.Second) // n1's timeout and a claim round: n2 would have claimed by now
				total, twice = hook.tally(uids, "leave lobby", "offline")
				assert.Equal(t, users, total["leave lobby"], "leaves, n2's claims included")
				assert.Equal(t, users, total["offline"], "offlines, n2's claims included")
				assert.Zero(t, twice, "users with an edge twice, n2's claims included")
			}
		})
	}
}

// A Hub on Redis that shuts down tells its OnPresence and OnEdges of its
// users going offline and leaving the lobby, once each, before Shutdown
// returns: it withdrew them itself, so no other node claims them later.
func TestHubShutdownTellsItsCallbacksOfItsUsersLeaving(t *testing.T) {
	srv := startRedis(t)
	type heard struct {
		mu       sync.Mutex
		presence map[string]int // "uid true|false" -> calls
		edges    map[string]int // "kind uid [channel]" -> edges
	}
	listen := func() (*heard, transport.Config) {
		h := &heard{presence: map[string]int{}, edges: map[string]int{}}
		return h, transport.Config{Slots: 31, Tick: 100 * time.Millisecond,
			OnPresence: func(uid string, online bool) {
				h.mu.Lock()
				defer h.mu.Unlock()
				h.presence[fmt.Sprintf("%s %v", uid, online)]++
			},
			OnEdges: func(es []presence.Edge) {
				h.mu.Lock()
				defer h.mu.Unlock()
				for _, e := range es {
					h.edges[strings.TrimSpace(e.Kind.String()+" "+e.UID+" "+e.Channel)]++
				}
			}}
	}
	count := func(h *heard, uids []string, format string, fromEdges bool) (total, twice int) {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, uid := range uids {
			n := h.presence[fmt.Sprintf(format, uid)]
			if fromEdges {
				n = h.edges[fmt.Sprintf(format, uid)]
			}
			total += n
			if n > 1 {
				twice++
			}
		}
		return total, twice
	}
	heardA, tcA := listen()
	hsA, _, hubA := startHubConfig(t, testConfig(srv.client(t), "a"), tcA, nil)
	heardB, tcB := listen()
	startHubConfig(t, testConfig(srv.client(t), "b"), tcB, nil)

	const users = 300
	uids := userIDs("u", users)
	holdUsers(t, strings.TrimPrefix(hsA.URL, "http://"), uids)
	eventually(t, "every user online and in the lobby", func(c *assert.CollectT) {
		n, _ := count(heardA, uids, "%s true", false)
		assert.Equal(c, users, n, "online")
		n, _ = count(heardA, uids, "join %s lobby", true)
		assert.Equal(c, users, n, "join")
	})

	ctx, cancel := context.WithTimeout(context.Background(), processWait)
	defer cancel()
	start := time.Now()
	require.NoError(t, hubA.Shutdown(ctx))
	t.Logf("Shutdown with %d users: %v", users, time.Since(start).Round(time.Millisecond))
	// Heard before Shutdown returned: the callbacks have stopped since.
	for _, c := range []struct {
		format    string
		fromEdges bool
	}{{"%s false", false}, {"offline %s", true}, {"leave %s lobby", true}} {
		total, twice := count(heardA, uids, c.format, c.fromEdges)
		assert.Equal(t, users, total, c.format)
		assert.Zero(t, twice, c.format+" twice")
	}
	time.Sleep(testTimeout + 2*testClaim) // long enough for b to claim what a might have left
	total, _ := count(heardB, uids, "%s false", false)
	assert.Zero(t, total, "offlines b produced by claiming a's records")
}
