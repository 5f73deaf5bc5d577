package webhook_test

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/webhook"
)

// An event given an ID keeps it on the wire, and OnDone hears it once the
// batch is delivered (after the retries it took), never before; events
// the Sender named are not reported.
func TestOnDoneHearsGivenIDsOnceDelivered(t *testing.T) {
	var (
		mu   sync.Mutex
		done []string
	)
	rc := newReceiver(t, func(i int, _ *http.Request) int {
		if i == 0 {
			mu.Lock()
			defer mu.Unlock()
			assert.Empty(t, done, "nothing done before a 2xx")
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	s := start(t, webhook.Config{URL: rc.URL, MinBackoff: testPoll, MaxBackoff: testPoll, OnDone: func(ids []string) {
		mu.Lock()
		defer mu.Unlock()
		done = append(done, ids...)
	}})
	evs := events(0, 4)
	evs[0].ID, evs[2].ID = "evt_x_1_10", "evt_x_2_11"
	s.Add(evs...)
	got := rc.waitDelivered(t, 4, true)
	assert.Equal(t, "evt_x_1_10", got[0].ID)
	assert.Equal(t, "evt_x_2_11", got[2].ID)
	assert.NotEqual(t, "", got[1].ID, "named by the Sender")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) == 2
	}, testWait, testPoll)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"evt_x_1_10", "evt_x_2_11"}, done)
}

// Events dropped past Queue are done too: nobody will deliver them from
// this Sender.
func TestOnDoneHearsDroppedIDs(t *testing.T) {
	release := make(chan struct{})
	rc := newReceiver(t, func(i int, _ *http.Request) int {
		if i == 0 {
			<-release
		}
		return http.StatusOK
	})
	var (
		mu   sync.Mutex
		done []string
	)
	s := start(t, webhook.Config{URL: rc.URL, Queue: 2, MaxBatch: 1, OnDone: func(ids []string) {
		mu.Lock()
		defer mu.Unlock()
		done = append(done, ids...)
	}})
	evs := events(0, 5)
	for i := range evs {
		evs[i].ID = fmt.Sprintf("evt_x_0_%d", i)
	}
	s.Add(evs[0])
	require.Eventually(t, func() bool { return rc.count() == 1 }, testWait, testPoll, "the first batch in flight")
	s.Add(evs[1:]...) // the queue holds two: evs[1] and evs[2] are dropped
	close(release)
	rc.waitDelivered(t, 3, true)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) == 5
	}, testWait, testPoll)
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(done)
	assert.Equal(t, []string{"evt_x_0_0", "evt_x_0_1", "evt_x_0_2", "evt_x_0_3", "evt_x_0_4"}, done)
}

// Drops reach OnDone as they happen, while the batch before them is still
// in flight, not once its POST ends: an outbox holding them lets them go
// during the outage.
func TestOnDoneHearsDropsDuringAPost(t *testing.T) {
	release := make(chan struct{})
	rc := newReceiver(t, hang(release, nil, 0))
	var (
		mu   sync.Mutex
		done []string
	)
	s := start(t, webhook.Config{URL: rc.URL, Queue: 2, MaxBatch: 1, Timeout: time.Minute, OnDone: func(ids []string) {
		mu.Lock()
		defer mu.Unlock()
		done = append(done, ids...)
	}})
	evs := events(0, 5)
	for i := range evs {
		evs[i].ID = fmt.Sprintf("evt_x_0_%d", i)
	}
	s.Add(evs[0])
	require.Eventually(t, func() bool { return rc.count() == 1 }, testWait, testPoll, "the first batch in flight")
	for _, e := range evs[1:] { // one at a time, as edges come: evs[1] and evs[2] are dropped
		s.Add(e)
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) == 2
	}, testWait, testPoll, "the drops heard while the POST hangs")
	assert.Equal(t, 1, rc.count(), "the POST hangs still")
	mu.Lock()
	assert.Equal(t, []string{"evt_x_0_1", "evt_x_0_2"}, done)
	mu.Unlock()
	close(release)
}
