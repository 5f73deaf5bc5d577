package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/webhook"
)

const (
	// testWait bounds waits for what must happen eventually: generous, so a
	// loaded 2-core machine under -race does not fail them.
	testWait = 20 * time.Second
	testPoll = 5 * time.Millisecond
)

// request is one POST a receiver got.
type request struct {
	body   []byte
	header http.Header
	status int // what the receiver answered; 0 while it has not

	events    []webhook.Event // decoded from body
	decodeErr error           // if it is not {"events":[...]}
}

// receiver is a webhook backend on loopback that keeps every POST it gets,
// in order of arrival, and answers each with what answer says.
type receiver struct {
	*httptest.Server

	mu   sync.Mutex
	reqs []*request

	// answer returns the status for the i-th POST (from 0); it may block.
	// nil answers 200.
	answer func(i int, r *http.Request) int
}

func newReceiver(t *testing.T, answer func(i int, r *http.Request) int) *receiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return newReceiverOn(t, l, answer)
}

// newReceiverOn serves on l; the test's cleanup closes it.
func newReceiverOn(t *testing.T, l net.Listener, answer func(i int, r *http.Request) int) *receiver {
	t.Helper()
	rc := &receiver{answer: answer}
	rc.Server = httptest.NewUnstartedServer(http.HandlerFunc(rc.serve))
	_ = rc.Listener.Close()
	rc.Listener = l
	rc.Start()
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the sender gave up mid-body
	}
	req := &request{body: body, header: r.Header.Clone()}
	// Decoded once, here: tests poll what arrived, and 100,000 events are
	// too many to decode again at every poll.
	req.events, req.decodeErr = decode(body)
	rc.mu.Lock()
	i := len(rc.reqs)
	rc.reqs = append(rc.reqs, req)
	rc.mu.Unlock()
	status := http.StatusOK
	if rc.answer != nil {
		status = rc.answer(i, r)
	}
	rc.mu.Lock()
	req.status = status
	rc.mu.Unlock()
	w.WriteHeader(status)
}

// requests returns a copy of the POSTs so far.
func (rc *receiver) requests() []request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make([]request, len(rc.reqs))
	for i, r := range rc.reqs {
		out[i] = *r
	}
	return out
}

func (rc *receiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.reqs)
}

// delivered returns the events of the POSTs answered 2xx, in order of
// arrival; with dedupe, a POST whose webhook-id was seen before is skipped
// (a retry whose first 2xx the sender did not hear in time), as a backend
// does. It fails if a body did not parse.
func (rc *receiver) delivered(t *testing.T, dedupe bool) []webhook.Event {
	t.Helper()
	var out []webhook.Event
	seen := map[string]bool{}
	for i, r := range rc.requests() {
		require.NoError(t, r.decodeErr, "POST %d: %.200s", i, r.body)
		id := r.header.Get("webhook-id")
		require.NotEmpty(t, id, "POST %d: no webhook-id", i)
		if r.status < 200 || r.status > 299 || (dedupe && seen[id]) {
			continue
		}
		seen[id] = true
		out = append(out, r.events...)
	}
	return out
}

// decode parses a body strictly: {"events":[...]} with the Event fields
// only, and nothing after it.
func decode(body []byte) ([]webhook.Event, error) {
	var b struct {
		Events []webhook.Event `json:"events"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more after the object")
	}
	return b.Events, nil
}

// waitDelivered waits up to wait until n events were delivered (as
// delivered counts them) and returns them.
func (rc *receiver) waitDelivered(t *testing.T, n int, dedupe bool) []webhook.Event {
	t.Helper()
	return rc.waitDeliveredFor(t, n, dedupe, testWait)
}

func (rc *receiver) waitDeliveredFor(t *testing.T, n int, dedupe bool, wait time.Duration) []webhook.Event {
	t.Helper()
	// Each poll counts, rather than gathers, what arrived: gathering
	// 100,000 events every few milliseconds took the CPU the Sender and the
	// receiver needed, and the wait ran out under -race on a busy machine.
	// A body that did not parse ends the wait; delivered names it.
	require.Eventually(t, func() bool {
		got, bad := rc.deliveredCount(dedupe)
		return bad || got >= n
	}, wait, testPoll, "want %d events delivered", n)
	return rc.delivered(t, dedupe)
}

// deliveredCount is len(delivered(t, dedupe)), and whether a body did not
// parse.
func (rc *receiver) deliveredCount(dedupe bool) (n int, bad bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	seen := map[string]bool{}
	for _, r := range rc.reqs {
		if r.decodeErr != nil {
			return n, true
		}
		id := r.header.Get("webhook-id")
		if r.status < 200 || r.status > 299 || (dedupe && seen[id]) {
			continue
		}
		seen[id] = true
		n += len(r.events)
	}
	return n, false
}

var types = []string{"online", "join", "away", "active", "leave", "offline"}

// events returns n events numbered from..from+n-1: the number is in UID and
// At, and join and leave have a channel.
func events(from, n int) []webhook.Event {
	out := make([]webhook.Event, n)
	for i := range out {
		k := from + i
		e := webhook.Event{Type: types[k%len(types)], UID: fmt.Sprintf("u%d", k), At: 1_764_000_000_000 + int64(k)}
		if e.Type == "join" || e.Type == "leave" {
			e.Channel = fmt.Sprintf("c%d", k%7)
		}
		out[i] = e
	}
	return out
}

// wantBody is the body the spec gives for evs, written out by hand rather
// than by encoding/json: fields in the order id, type, channel, uid, at, and
// no channel when it is empty. The ids are those of got, the events that
// arrived, which the Sender named.
func wantBody(evs, got []webhook.Event) string {
	var b strings.Builder
	b.WriteString(`{"events":[`)
	for i, e := range evs {
		if i > 0 {
			b.WriteByte(',')
		}
		id := ""
		if i < len(got) {
			id = got[i].ID
		}
		if e.Channel == "" {
			fmt.Fprintf(&b, `{"id":%q,"type":%q,"uid":%q,"at":%d}`, id, e.Type, e.UID, e.At)
		} else {
			fmt.Fprintf(&b, `{"id":%q,"type":%q,"channel":%q,"uid":%q,"at":%d}`, id, e.Type, e.Channel, e.UID, e.At)
		}
	}
	b.WriteString("]}")
	return b.String()
}

// requireSame fails with the first difference between two event sequences
// rather than a diff of thousands of lines. It compares the edges, not the
// ids the Sender gave them, but requires each of got to have one.
func requireSame(t *testing.T, want, got []webhook.Event) {
	t.Helper()
	for i := range min(len(want), len(got)) {
		g := got[i]
		require.NotEmpty(t, g.ID, "event %d has no id", i)
		g.ID = want[i].ID
		if !reflect.DeepEqual(want[i], g) {
			require.Failf(t, "events differ", "at %d of %d: want %+v, got %+v", i, len(want), want[i], got[i])
		}
	}
	require.Equal(t, len(want), len(got), "number of events")
}

// start makes a Sender and runs it until the test ends.
func start(t *testing.T, cfg webhook.Config) *webhook.Sender {
	t.Helper()
	s, err := webhook.New(cfg)
	require.NoError(t, err)
	runUntilCleanup(t, s)
	return s
}

// runUntilCleanup runs s until the test ends, then checks that Run returned
// ctx.Err().
func runUntilCleanup(t *testing.T, s *webhook.Sender) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.ErrorIs(t, err, context.Canceled)
		case <-time.After(testWait):
			t.Error("Run did not return after its context ended")
		}
	})
}

// metric returns the value of the counter or gauge name in g; it fails if
// there is no such metric.
func metric(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			require.Len(t, mf.GetMetric(), 1, name)
			m := mf.GetMetric()[0]
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	require.Failf(t, "no metric", "%s not registered", name)
	return 0
}

// hang is an answer func for a receiver: the POSTs numbered in stuck block
// until the sender gives up on them (their context ends) or release is
// closed, and are then answered 500; the rest are answered 200. cut, if
// buffered, receives the number of each POST the sender gave up on.
func hang(release <-chan struct{}, cut chan<- int, stuck ...int) func(int, *http.Request) int {
	return func(i int, r *http.Request) int {
		for _, k := range stuck {
			if i != k {
				continue
			}
			select {
			case <-r.Context().Done():
				select {
				case cut <- i:
				default: // nobody counts; never block the handler on it
				}
			case <-release:
			}
			return http.StatusInternalServerError
		}
		return http.StatusOK
	}
}
