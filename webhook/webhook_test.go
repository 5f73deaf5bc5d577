package webhook_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/webhook"
)

// Events added in one Add go out in full batches, each once, in order, as
// the spec's JSON.
func TestDeliversInOrderInBatches(t *testing.T) {
	rc := newReceiver(t, nil)
	s := start(t, webhook.Config{URL: rc.URL + "/hook"})
	evs := events(0, 10_000)
	s.Add(evs...)

	got := rc.waitDelivered(t, len(evs), false)
	requireSame(t, evs, got)
	reqs := rc.requests()
	assert.LessOrEqual(t, len(reqs), 10_000/1_000+2, "POSTs")
	sent := 0
	for i, r := range reqs {
		assert.Equal(t, "application/json", r.header.Get("Content-Type"), "POST %d", i)
		assert.Empty(t, r.header.Values("X-Presenced-Signature"), "POST %d: signed without a secret", i)
		assert.Empty(t, r.header.Values("webhook-signature"), "POST %d: signed without a secret", i)
		assert.NotEmpty(t, r.header.Get("webhook-id"), "POST %d: webhook-id without a secret", i)
		assert.NotEmpty(t, r.header.Get("webhook-timestamp"), "POST %d: webhook-timestamp without a secret", i)
		require.NoError(t, r.decodeErr, "POST %d", i)
		n := len(r.events)
		require.LessOrEqual(t, n, 1_000, "POST %d: events in a batch", i)
		assert.Equal(t, wantBody(evs[sent:sent+n], r.events), string(r.body), "POST %d", i)
		sent += n
	}
}

// With a secret, each POST carries the deprecated header: the HMAC-SHA256 of
// its raw body, keyed with the secret, as the receiver computes it.
func TestSignature(t *testing.T) {
	const secret = "s3cret"
	rc := newReceiver(t, nil)
	s := start(t, webhook.Config{URL: rc.URL, Secret: secret, MaxBatch: 4})
	evs := events(0, 10)
	s.Add(evs...)
	requireSame(t, evs, rc.waitDelivered(t, len(evs), false))

	reqs := rc.requests()
	require.Len(t, reqs, 3)
	for i, r := range reqs {
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(r.body)
		want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
		assert.Equal(t, []string{want}, r.header.Values("X-Presenced-Signature"), "POST %d", i)
	}
}

// A batch answered 500 is sent again byte for byte until it is accepted,
// and nothing after it is sent before.
func TestRetriesSameBatchUntilAccepted(t *testing.T) {
	rc := newReceiver(t, func(i int, _ *http.Request) int {
		if i < 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	reg := prometheus.NewRegistry()
	s, err := webhook.New(webhook.Config{URL: rc.URL, MaxBatch: 10, MinBackoff: time.Millisecond,
		MaxBackoff: 10 * time.Millisecond, Registerer: reg})
	require.NoError(t, err)
	evs := events(0, 15)
	s.Add(evs...) // before Run: one queue, so the first batch is full
	runUntilCleanup(t, s)

	requireSame(t, evs, rc.waitDelivered(t, len(evs), false))
	reqs := rc.requests()
	require.Len(t, reqs, 4)
	for i, want := range []int{500, 500, 200, 200} {
		assert.Equal(t, want, reqs[i].status, "POST %d", i)
	}
	assert.Equal(t, wantBody(evs[:10], reqs[0].events), string(reqs[0].body))
	assert.True(t, bytes.Equal(reqs[0].body, reqs[1].body), "first retry differs")
	assert.True(t, bytes.Equal(reqs[0].body, reqs[2].body), "second retry differs")
	assert.Equal(t, wantBody(evs[10:], reqs[3].events), string(reqs[3].body))
	assert.Equal(t, 20.0, metric(t, reg, "presenced_webhook_events_retried_total"), "two retries of 10 events")
	// The receiver has the last batch before the Sender has its answer.
	require.Eventually(t, func() bool { return metric(t, reg, "presenced_webhook_events_sent_total") == 15 },
		testWait, testPoll, "sent_total: %v", metric(t, reg, "presenced_webhook_events_sent_total"))
}

// A POST not answered within Timeout is abandoned and the batch sent again.
func TestTimeoutRetries(t *testing.T) {
	release, cut := make(chan struct{}), make(chan int, 1)
	rc := newReceiver(t, hang(release, cut, 0))
	t.Cleanup(func() { close(release) }) // runs before the receiver closes
	reg := prometheus.NewRegistry()
	s := start(t, webhook.Config{URL: rc.URL, Timeout: 200 * time.Millisecond,
		MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond, Registerer: reg})
	evs := events(0, 5)
	s.Add(evs...)

	// Deduplicated: on a loaded machine a 200 may also miss the 200 ms.
	requireSame(t, evs, rc.waitDelivered(t, len(evs), true))
	select {
	case i := <-cut:
		assert.Equal(t, 0, i)
	case <-time.After(testWait):
		require.Fail(t, "the sender never gave up on the hung POST")
	}
	reqs := rc.requests()
	require.GreaterOrEqual(t, len(reqs), 2)
	for i, r := range reqs {
		assert.Equal(t, wantBody(evs, reqs[0].events), string(r.body), "POST %d", i)
	}
	assert.GreaterOrEqual(t, metric(t, reg, "presenced_webhook_events_retried_total"), 5.0)
}

// Run stops when its context ends, even mid-POST, without draining; a later
// Run sends the abandoned batch first. Only one Run delivers at a time.
func TestRunStopsPromptlyAndResumes(t *testing.T) {
	release, cut := make(chan struct{}), make(chan int, 1)
	rc := newReceiver(t, hang(release, cut, 0))
	t.Cleanup(func() { close(release) })
	s, err := webhook.New(webhook.Config{URL: rc.URL, Timeout: time.Minute, MaxBatch: 3})
	require.NoError(t, err)
	evs := events(0, 7)
	s.Add(evs...)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	require.Eventually(t, func() bool { return rc.count() == 1 }, testWait, testPoll, "first POST")
	assert.ErrorContains(t, s.Run(context.Background()), "another Run", "a second Run")
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(testWait):
		require.Fail(t, "Run did not return mid-POST after its context ended")
	}
	assert.Equal(t, 1, rc.count(), "Run drained the queue instead of stopping")

	runUntilCleanup(t, s)
	requireSame(t, evs, rc.waitDelivered(t, len(evs), false))
	reqs := rc.requests()
	require.Len(t, reqs, 4)
	assert.Equal(t, string(reqs[0].body), string(reqs[1].body), "the abandoned batch first")
	assert.Equal(t, reqs[0].header.Get("webhook-id"), reqs[1].header.Get("webhook-id"), "the abandoned batch's webhook-id")
}
