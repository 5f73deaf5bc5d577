package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/webhook"
)

// The master SIGKILLed under churn: three Sentinels agree it is down and
// promote its replica, which may have missed the master's last writes.
// Nobody who stayed gets an edge again, and a webhook backend gets each
// edge made once. The killed master takes with it the replies of the
// writes it ran last; the writes asked again for their edges keep churned
// users' edges alternating all the same.
func TestSentinelFailoverKilledUnderChurn(t *testing.T) {
	testFailoverUnderChurn(t, func(s *sentinelSet) {
		s.master.kill()
	})
}

// SENTINEL FAILOVER under churn: the master is alive and demoted to a
// replica of the new one, dropping what it took after the promotion.
// Sentinel demotes it only when its next INFO (every 10 s) finds it still
// a master; until then it stays a master, and subscriptions left on it
// hear none of the edges published on the new one. The nodes move theirs
// when the Sentinels announce the switch, so the diffs resume at once.
func TestSentinelFailoverForcedUnderChurn(t *testing.T) {
	testFailoverUnderChurn(t, func(s *sentinelSet) {
		require.NoError(t, s.sentinel(0).Failover(context.Background(), "m").Err())
	})
}

// sentinelSet is a master, its replica and three Sentinels monitoring it
// as "m" with a quorum of two.
type sentinelSet struct {
	t         *testing.T
	master    *redisServer
	replica   *redisServer
	sentinels []string
}

func startSentinelSet(t *testing.T) *sentinelSet {
	t.Helper()
	began := time.Now()
	master := startRedis(t)
	s := &sentinelSet{t: t, master: master,
		replica: startRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.port))}
	for range 3 {
		s.sentinels = append(s.sentinels, startSentinelQuorum(t, master, 2))
	}
	rc := s.replica.client(t)
	require.Eventually(t, func() bool {
		return replicationField(rc, "master_link_status") == "up"
	}, testWait, 20*time.Millisecond, "the replica syncs")
	// Each Sentinel knows the replica and the two others, or a failover
	// could find no replica or no majority.
	for i := range s.sentinels {
		sc := s.sentinel(i)
		require.Eventually(t, func() bool {
			replicas, err := sc.Replicas(context.Background(), "m").Result()
			if err != nil || len(replicas) != 1 || replicas[0]["port"] != strconv.Itoa(s.replica.port) {
				return false
			}
			others, err := sc.Sentinels(context.Background(), "m").Result()
			return err == nil && len(others) == 2
		}, 30*time.Second, 50*time.Millisecond, "sentinel %s knows the replica and the other sentinels", s.sentinels[i])
	}
	t.Logf("sentinels agree on the master, replica and each other %v after they started", time.Since(began).Round(time.Millisecond))
	return s
}

// sentinel returns a client of the i-th Sentinel.
func (s *sentinelSet) sentinel(i int) *redis.SentinelClient {
	c := redis.NewSentinelClient(&redis.Options{Addr: s.sentinels[i], DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 2 * time.Second, MaxRetries: 1})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// client returns a client that finds the master through the Sentinels,
// made by NewClient as presenced makes it, so that the engine hears the
// Sentinels announce a new master.
func (s *sentinelSet) client() redis.UniversalClient {
	u := "redis://" + s.sentinels[0] + "?master_name=m&dial_timeout=200ms&read_timeout=2s&max_retries=1"
	for _, addr := range s.sentinels[1:] {
		u += "&addr=" + addr
	}
	c, err := NewClient(u)
	require.NoError(s.t, err)
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// promoted waits until the replica is the master and every Sentinel names it.
func (s *sentinelSet) promoted() {
	s.t.Helper()
	rc := s.replica.client(s.t)
	want := []string{"127.0.0.1", strconv.Itoa(s.replica.port)}
	require.Eventually(s.t, func() bool {
		if replicationField(rc, "role") != "master" {
			return false
		}
		for i := range s.sentinels {
			addr, err := s.sentinel(i).GetMasterAddrByName(context.Background(), "m").Result()
			if err != nil || !slices.Equal(addr, want) {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond, "the sentinels promote the replica")
}

func replicationField(c redis.UniversalClient, field string) string {
	info, err := c.Info(context.Background(), "replication").Result()
	if err != nil {
		return ""
	}
	return infoField(info, field)
}

func testFailoverUnderChurn(t *testing.T, fail func(*sentinelSet)) {
	stableN, churnN := 200, 300
	if raceEnabled {
		stableN, churnN = 100, 150
	}
	set := startSentinelSet(t)
	rc := newBatchReceiver(t)
	hooks := map[string]*webhook.Sender{}
	for _, name := range []string{"a", "b"} {
		hooks[name] = startHookSender(t, rc.URL)
	}
	var promoted time.Duration
	res := testChurn(t, churnSetup{client: set.client, stable: stableN, churned: churnN,
		wrap: func(e *Engine, rec *recorder) presence.Relay {
			return senderRelay{recorder: rec, hook: hooks[e.Node()]}
		}}, func() time.Time {
		began := time.Now()
		fail(set)
		set.promoted()
		promoted = time.Since(began)
		return began
	})
	t.Logf("failover: replica promoted %v after it began; longest gap in b's member edges of a's users %v; member sets exact %v after it began; %d repeated and %d missing edges of stable users, %d churned users with unequal online/offline",
		promoted.Round(time.Millisecond), res.gap.Round(time.Millisecond), res.exact.Round(time.Millisecond), res.dups, res.missing, res.unequal)
	// The subscriptions move when the Sentinels announce the new master,
	// not when they demote the old one, about 10 s later.
	assert.Less(t, res.gap, promoted+testWait/2, "b heard a's member edges again after the switch")

	// The webhook backend: every event added reaches it, and the distinct
	// batches carry each edge made once.
	for name, h := range hooks {
		ctx, cancel := context.WithTimeout(context.Background(), testWait)
		require.NoError(t, h.Drain(ctx), "webhooks of %s delivered", name)
		cancel()
	}
	batches, posts, retried := rc.batches(t)
	var got, want []string
	ids := map[string]bool{}
	for _, evs := range batches {
		for _, ev := range evs {
			assert.False(t, ids[ev.ID], "event %s in two batches", ev.ID)
			ids[ev.ID] = true
			got = append(got, fmt.Sprintf("%s %s %s %d", ev.Type, ev.UID, ev.Channel, ev.At))
		}
	}
	for _, e := range res.made {
		want = append(want, fmt.Sprintf("%s %s %s %d", e.Kind, e.UID, e.Channel, e.At.UnixMilli()))
	}
	slices.Sort(got)
	slices.Sort(want)
	extra, lacking := multisetMinus(got, want), multisetMinus(want, got)
	assert.Empty(t, extra, "events the backend got that no node made, or got twice")
	assert.Empty(t, lacking, "edges made that never reached the backend")
	t.Logf("webhooks: %d events in %d distinct batches over %d POSTs (%d answered 503 and sent again); %d edges made, %d events extra, %d lacking",
		len(got), len(batches), posts, retried, len(want), len(extra), len(lacking))
}

// multisetMinus returns x less y, both sorted, counting repeats.
func multisetMinus(x, y []string) []string {
	var out []string
	j := 0
	for _, s := range x {
		for j < len(y) && y[j] < s {
			j++
		}
		if j < len(y) && y[j] == s {
			j++
			continue
		}
		out = append(out, s)
	}
	return out
}

// senderRelay hands the edges its node made to a webhook Sender as well as
// to the recorder, as a Node's OnEdges does.
type senderRelay struct {
	*recorder
	hook *webhook.Sender
}

func (h senderRelay) Receive(e presence.Event) {
	h.recorder.Receive(e)
	if e.Kind == presence.EventProduced {
		h.hook.AddEdges([]presence.Edge{e.Edge})
	}
}

// startHookSender starts a webhook Sender to url, retrying quickly, until the
// test ends.
func startHookSender(t *testing.T, url string) *webhook.Sender {
	t.Helper()
	s, err := webhook.New(webhook.Config{URL: url, Timeout: testWait, MinBackoff: 10 * time.Millisecond,
		MaxBackoff: 100 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return s
}

// batchReceiver is a webhook backend that keeps every POST; it answers
// every fourth with 503 after reading it, as a backend whose answer was
// lost, so that the batch comes again under the same webhook-id.
type batchReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	posts []batchPost
}

type batchPost struct {
	id     string
	body   []byte
	status int
}

func newBatchReceiver(t *testing.T) *batchReceiver {
	rc := &batchReceiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		rc.mu.Lock()
		status := http.StatusOK
		if len(rc.posts)%4 == 3 {
			status = http.StatusServiceUnavailable
		}
		rc.posts = append(rc.posts, batchPost{id: r.Header.Get(webhook.IDHeader), body: body, status: status})
		rc.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// batches returns the events of each distinct webhook-id, checking that
// every POST of one carried the same body, with the count of POSTs and of
// those answered 503.
func (rc *batchReceiver) batches(t *testing.T) (map[string][]webhook.Event, int, int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	bodies := map[string][]byte{}
	out := map[string][]webhook.Event{}
	retried := 0
	for _, p := range rc.posts {
		if p.status != http.StatusOK {
			retried++
		}
		require.True(t, strings.HasPrefix(p.id, "msg_"), "webhook-id %q", p.id)
		if prev, ok := bodies[p.id]; ok {
			assert.True(t, bytes.Equal(prev, p.body), "batch %s sent again with another body", p.id)
			continue
		}
		bodies[p.id] = p.body
		var b struct {
			Events []webhook.Event `json:"events"`
		}
		require.NoError(t, json.Unmarshal(p.body, &b), "body of %s", p.id)
		out[p.id] = b.Events
	}
	return out, len(rc.posts), retried
}
