package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// dropLogEvery spaces the log lines about dropped events: an outage drops
// some every tick, and one line per tick would bury the rest of the log.
const dropLogEvery = 10 * time.Second

// maxDrain is how much of an answer's body Run reads, so that the
// connection can be reused; a backend has nothing to say in it.
const maxDrain = 64 << 10

// batch is one POST's worth of events, encoded once so that every attempt
// sends the same bytes under the same webhook-id; only the timestamp and
// the signature over it are made anew for each attempt.
type batch struct {
	n         int      // events
	given     []string // the IDs Add was given, for OnDone
	id        string   // the webhook-id header
	body      []byte
	signature string // the deprecated header's value; "" without a secret
}

// Run delivers queued events until ctx is done, then returns ctx.Err(). It
// stops promptly: it abandons a POST in flight and does not drain the
// queue. What was queued stays in the Sender, and the batch it was
// delivering is the first a later Run sends. Only one Run may deliver at a
// time: a call while another runs returns an error at once.
func (s *Sender) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("webhook: Run called while another Run is delivering")
	}
	defer s.running.Store(false)
	// Drops not yet logged are logged on the way out, whatever the spacing.
	defer s.logDrops(time.Time{})
	if s.owned {
		defer s.client.CloseIdleConnections()
	}
	if s.onDone != nil {
		defer s.reportDrops(ctx)()
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.logDrops(time.Now())
		if s.cur == nil {
			if s.cur = s.take(); s.cur == nil {
				if err := s.pause(ctx, 0); err != nil {
					return err
				}
				continue
			}
		}
		if s.failures > 0 {
			s.m.retried.Add(float64(s.cur.n))
		}
		err := s.post(ctx, s.cur)
		if err == nil {
			s.m.sent.Add(float64(s.cur.n))
			s.reportDone(s.cur.given)
			if s.failures > 0 {
				s.log.Info("webhook: delivered after retries", "url", s.logURL, "events", s.cur.n, "attempts", s.failures+1)
				// The outage is over: say at once what it cost.
				s.logDrops(time.Time{})
			}
			s.cur, s.failures = nil, 0
			s.inFlight.Store(0)
			continue
		}
		if ctx.Err() != nil {
			// Cut short by ctx, not a failure of the backend: the next Run
			// sends the batch again.
			return ctx.Err()
		}
		s.failures++
		wait := s.backoff(s.failures)
		s.log.Warn("webhook: batch not delivered, will retry", "url", s.logURL, "err", err,
			"events", s.cur.n, "attempt", s.failures, "retry_in", wait)
		if err := s.pause(ctx, wait); err != nil {
			return err
		}
	}
}

// take removes up to MaxBatch events from the front of the queue, names
// the batch and its events and encodes them, or returns nil if none wait.
func (s *Sender) take() *batch {
	s.mu.Lock()
	evs := s.q.pop(s.batch)
	s.m.queue.Set(float64(s.q.n))
	// Under mu, so that Drain never sees the events in neither place.
	s.inFlight.Store(int64(len(evs)))
	s.mu.Unlock()
	if len(evs) == 0 {
		return nil
	}
	s.batches++
	n := strconv.FormatUint(s.batches, 10)
	evPrefix := "evt_" + s.prefix + "_" + n + "_"
	var given []string
	if s.onDone != nil {
		given = givenIDs(nil, evs)
	}
	for i := range evs {
		if evs[i].ID == "" {
			evs[i].ID = evPrefix + strconv.Itoa(i)
		}
	}
	// Marshal cannot fail on strings and integers, and HTML escaping would
	// only make a backend's logs harder to read.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(struct {
		Events []Event `json:"events"`
	}{evs})
	b := &batch{n: len(evs), given: given, id: "msg_" + s.prefix + "_" + n, body: bytes.TrimSuffix(buf.Bytes(), []byte("\n"))}
	if len(s.secret) > 0 {
		mac := hmac.New(sha256.New, s.secret)
		mac.Write(b.body)
		b.signature = "sha256=" + hex.EncodeToString(mac.Sum(nil))
	}
	return b
}

// reportDone hands OnDone the given IDs of a delivered batch and of the
// events dropped since the last call, one call at a time.
func (s *Sender) reportDone(delivered []string) {
	if s.onDone == nil {
		return
	}
	s.doneMu.Lock()
	defer s.doneMu.Unlock()
	s.mu.Lock()
	ids := append(delivered, s.gone...)
	s.gone = nil
	s.mu.Unlock()
	if len(ids) > 0 {
		s.onDone(ids)
	}
}

// reportDrops hands OnDone the IDs of dropped events as they are dropped,
// on a goroutine of its own, until ctx ends or the returned stop is
// called; stop waits for it. Between attempts would be too late: a backend
// that is down keeps Run in a POST or a backoff for up to a timeout or
// MaxBackoff, while every event that arrives drops one. Drops that come
// while a call is under way go together in the next one.
func (s *Sender) reportDrops(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			s.reportDone(nil)
			select {
			case <-ctx.Done():
				return
			case <-s.goneWake:
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// sign returns the webhook-signature header of an attempt at b made at
// timestamp (Unix seconds, as sent).
func (s *Sender) sign(b *batch, timestamp string) string {
	mac := hmac.New(sha256.New, s.key)
	mac.Write([]byte(b.id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(b.body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// post sends b once and returns nil if the backend answered 2xx within the
// timeout.
func (s *Sender) post(ctx context.Context, b *batch) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(b.body))
	if err != nil {
		return fmt.Errorf("make request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	timestamp := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set(IDHeader, b.id)
	req.Header.Set(TimestampHeader, timestamp)
	if s.key != nil {
		req.Header.Set(StandardSignatureHeader, s.sign(b, timestamp))
	}
	if b.signature != "" {
		req.Header.Set(SignatureHeader, b.signature)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("no answer within %v: %w", s.timeout, err)
		}
		return err // a *url.Error: it names the method and the URL, without password
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("backend answered %s", resp.Status)
	}
	return nil
}

// backoff returns the wait after the n-th consecutive failure: uniformly
// random ("full jitter", so that nodes that failed together do not retry
// together) between MinBackoff and MinBackoff·2ⁿ, capped at MaxBackoff.
func (s *Sender) backoff(n int) time.Duration {
	ceiling := s.maxWait
	if n < 62 {
		if c := s.minWait << n; c>>n == s.minWait && c < ceiling {
			ceiling = c
		}
	}
	if ceiling <= s.minWait {
		return s.minWait
	}
	return s.minWait + rand.N(ceiling-s.minWait+1)
}

// pause waits for d, or for an Add if d is 0, logging drops meanwhile; it
// returns ctx.Err() if ctx ends first.
func (s *Sender) pause(ctx context.Context, d time.Duration) error {
	var done <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		done = t.C
	}
	for {
		var logDue <-chan time.Time
		if next := s.logDrops(time.Now()); next > 0 {
			logDue = time.After(next)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			return nil
		case <-s.wake:
			if d == 0 {
				return nil
			}
		case <-logDue:
		}
	}
}

// logDrops writes one line about the events dropped since the last one,
// unless that was less than dropLogEvery before now; then it returns how long
// until it may write. A zero now writes whatever the spacing. It returns 0 if
// nothing waits to be logged.
func (s *Sender) logDrops(now time.Time) time.Duration {
	s.mu.Lock()
	n, total := s.unlogged, s.dropped
	if n == 0 {
		s.mu.Unlock()
		return 0
	}
	if !now.IsZero() && !s.lastDropLog.IsZero() {
		if wait := s.lastDropLog.Add(dropLogEvery).Sub(now); wait > 0 {
			s.mu.Unlock()
			return wait
		}
	}
	if now.IsZero() {
		now = time.Now()
	}
	s.unlogged, s.lastDropLog = 0, now
	s.mu.Unlock()
	s.log.Warn("webhook: queue full, dropped the oldest events", "url", s.logURL,
		"dropped", n, "dropped_total", total, "queue", s.limit)
	return 0
}
