// Package webhook POSTs the presence edges a node produced to the embedder's
// backend, in batches, in the order they happened.
//
// A Sender holds the edges in a bounded queue. Add puts them at its back and
// never waits; Run takes up to Config.MaxBatch from its front as one batch
// and POSTs it as
//
//	{"events":[{"id":"evt_…_1_0","type":"online","uid":"bob","at":1764000000000},
//	  {"id":"evt_…_1_1","type":"join","channel":"lobby","uid":"bob","at":1764000000000}]}
//
// with Content-Type application/json, signed the Standard Webhooks way
// (https://www.standardwebhooks.com): a webhook-id header naming the batch,
// a webhook-timestamp header with the Unix seconds of the attempt and, given
// a Secret, a webhook-signature header "v1,<base64 HMAC-SHA256 of
// id.timestamp.body>", so that a receiver can check a POST with any Standard
// Webhooks library, reject one older than its tolerance (a replay) and drop
// repeats by webhook-id. Each event carries an id of its own. The older
// header X-Presenced-Signature: sha256=<hex HMAC-SHA256 of the body> is sent
// too, given a Secret, and is deprecated.
//
// A batch not answered with a 2xx status within Config.Timeout is sent again,
// with the same body, webhook-id and event ids (and a new timestamp and
// signature), after an exponential backoff with full jitter, and no later
// batch is sent before it succeeds. While the backend is down the queue
// fills; past Config.Queue events the oldest waiting ones are dropped,
// counted in presenced_webhook_events_dropped_total and logged.
//
// Delivery is at least once: a batch whose 2xx answer was lost (a timeout
// after the backend took it, or Run stopped mid-request) is sent again, so a
// backend drops repeats by webhook-id, or event by event by their ids. Both
// are unique cluster-wide: each Sender draws a random 128-bit prefix for
// them when it is made. A Sender sends what it is given; in a cluster each
// node hands it only the edges that node produced, so that each edge is sent
// once.
package webhook

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/protocol"
)

// Defaults used when a Config field is zero.
const (
	DefaultQueue      = 100_000
	DefaultTimeout    = 5 * time.Second
	DefaultMaxBatch   = 1_000
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
)

// The headers of a POST, after Standard Webhooks. IDHeader and
// TimestampHeader are on every POST; StandardSignatureHeader only with a
// Secret.
const (
	// IDHeader names the batch: "msg_<prefix>_<n>", where prefix is the
	// Sender's random one and n counts its batches from 1. Every attempt at
	// a batch carries the same one; no other batch in the cluster does.
	IDHeader = "webhook-id"
	// TimestampHeader carries the Unix seconds at which the attempt was
	// made, in decimal.
	TimestampHeader = "webhook-timestamp"
	// StandardSignatureHeader carries "v1," and the base64 (standard,
	// padded) HMAC-SHA256 of id + "." + timestamp + "." + body, keyed with
	// the key of Config.Secret.
	StandardSignatureHeader = "webhook-signature"
)

// SecretPrefix marks a Config.Secret given as "whsec_<base64 of the key>",
// the form Standard Webhooks libraries take.
const SecretPrefix = "whsec_"

// SignatureHeader carries "sha256=" and the hex HMAC-SHA256 of the body,
// keyed with Config.Secret as given, byte for byte, "whsec_" and all.
//
// Deprecated: receivers should check StandardSignatureHeader, which also
// covers the batch's id and the time of the attempt, so that a replay is
// told apart; this header is still sent alongside it.
const SignatureHeader = "X-Presenced-Signature"

// Event is one presence edge.
type Event struct {
	// ID names the event, unique cluster-wide and the same on every
	// attempt at its batch. An ID given to Add is kept: an edge the engine
	// names (presence.Edge.ID), the same on every node that may send it, so
	// a receiver drops an edge sent twice by its ID. Otherwise the Sender
	// sets "evt_<prefix>_<n>_<i>" when it makes the batch: the i-th event
	// (from 0) of its n-th batch.
	ID      string `json:"id"`
	Type    string `json:"type"`              // online, offline, join, leave, away, active, update
	Channel string `json:"channel,omitempty"` // join and leave only
	UID     string `json:"uid"`
	// An update's whole new record, each part omitted when empty.
	Info json.RawMessage `json:"info,omitempty"`
	Mode string          `json:"mode,omitempty"`
	Note *protocol.Note  `json:"note,omitempty"`
	At   int64           `json:"at"` // Unix milliseconds
}

// Config configures a Sender. Only URL is required.
type Config struct {
	URL string // required: absolute http or https URL

	// Secret keys the signatures. "" sends none (webhook-id and
	// webhook-timestamp are sent all the same). "whsec_<base64>" keys the
	// webhook-signature header with the decoded bytes (standard alphabet,
	// padded; New rejects anything else after the prefix); any other string
	// keys it with its own bytes. The deprecated X-Presenced-Signature is
	// keyed with the string as given, whichever form it has.
	Secret string

	// Queue bounds the events waiting to be sent, not counting the batch
	// being delivered; 0 means DefaultQueue. Past it Add drops the oldest.
	Queue int
	// Timeout bounds one POST, from dialing to the end of its answer; 0
	// means DefaultTimeout.
	Timeout time.Duration
	// MaxBatch bounds the events of one POST; 0 means DefaultMaxBatch.
	MaxBatch int
	// MinBackoff and MaxBackoff bound the wait before a batch is sent
	// again; 0 means DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration

	// Client makes the POSTs; nil means a client of the Sender's own, which
	// does not follow redirects: a 3xx answer is a failure, retried, since
	// following a 301, 302 or 303 would turn the POST into a GET and take
	// its answer for a delivery.
	Client *http.Client
	// Logger gets a warning for each failed attempt, a line when a batch
	// goes through after failures, and the drops, at most one line every
	// 10 s; nil means silent.
	Logger *slog.Logger

	// Registerer, if set, registers the Sender's metrics, named
	// MetricsNamespace_webhook_... ("presenced" if empty): events_sent_total,
	// events_retried_total, events_dropped_total and queue_length. Two
	// Senders may share a Registerer under different namespaces.
	Registerer       prometheus.Registerer
	MetricsNamespace string

	// OnDone, if set, gets the IDs given to Add (see Event.ID) of events
	// that left the Sender: delivered (answered 2xx), or dropped past
	// Queue. A cluster engine's outbox hears there that it need not keep
	// them (cluster.Engine.Delivered). Run calls it, one call at a time: on
	// its own goroutine after each delivered batch, which waits for it, and
	// on another as soon as events are dropped, even while a POST or a
	// backoff is under way, each call with every drop since the last (drops
	// while no Run runs wait for the next Run).
	OnDone func(ids []string)
}

// Sender delivers events to one URL. Create one with New, feed it with Add
// and run its delivery with Run.
//
// Add is safe from any goroutine, at any time, before, during and after Run.
// Run delivers on the goroutine that calls it; one Run at a time (a second
// concurrent call returns an error), and a Run called after another returned
// resumes with the batch that one was delivering.
type Sender struct {
	url     string // as given, for requests
	logURL  string // without its password, for logs
	secret  []byte // the key of the deprecated SignatureHeader: Config.Secret as given
	key     []byte // the key of StandardSignatureHeader; nil without a secret
	prefix  string // random, drawn by New: the ids of this Sender's batches and events
	limit   int
	timeout time.Duration
	batch   int
	minWait time.Duration
	maxWait time.Duration
	client  *http.Client
	owned   bool // client made by New: Run closes its idle connections
	log     *slog.Logger
	m       *metrics

	// wake tells Run that Add queued events (or dropped some); capacity 1,
	// so Add never waits on it.
	wake chan struct{}

	onDone func(ids []string)
	// doneMu makes onDone's calls one at a time; goneWake (capacity 1)
	// tells reportDrops that gone has IDs.
	doneMu   sync.Mutex
	goneWake chan struct{}

	mu          sync.Mutex
	q           ring     // events waiting, oldest first
	gone        []string // given IDs of events dropped, for onDone
	unlogged    int64    // dropped, not yet in a log line
	dropped     int64    // dropped in all
	lastDropLog time.Time

	// Run's own, guarded by running.
	running  atomic.Bool
	cur      *batch       // the batch being delivered, held apart from q
	batches  uint64       // batches made so far: the n of their ids
	inFlight atomic.Int64 // cur's events, for Drain
	failures int          // consecutive failed attempts at cur
}

// New checks cfg and returns a Sender for it; Run starts delivery.
func New(cfg Config) (*Sender, error) {
	u, err := checkURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"Queue", int64(cfg.Queue)}, {"MaxBatch", int64(cfg.MaxBatch)}, {"Timeout", int64(cfg.Timeout)},
		{"MinBackoff", int64(cfg.MinBackoff)}, {"MaxBackoff", int64(cfg.MaxBackoff)},
	} {
		if f.v < 0 {
			return nil, fmt.Errorf("webhook: negative %s", f.name)
		}
	}
	key, err := signingKey(cfg.Secret)
	if err != nil {
		return nil, err
	}
	s := &Sender{
		url:      cfg.URL,
		logURL:   u.Redacted(),
		secret:   []byte(cfg.Secret),
		key:      key,
		prefix:   strings.ToLower(rand.Text()),
		limit:    orDefault(cfg.Queue, DefaultQueue),
		timeout:  orDefault(cfg.Timeout, DefaultTimeout),
		batch:    orDefault(cfg.MaxBatch, DefaultMaxBatch),
		minWait:  orDefault(cfg.MinBackoff, DefaultMinBackoff),
		maxWait:  orDefault(cfg.MaxBackoff, DefaultMaxBackoff),
		client:   cfg.Client,
		log:      cfg.Logger,
		onDone:   cfg.OnDone,
		wake:     make(chan struct{}, 1),
		goneWake: make(chan struct{}, 1),
	}
	if s.minWait > s.maxWait {
		return nil, fmt.Errorf("webhook: MinBackoff %v is above MaxBackoff %v (a zero field means its default)", s.minWait, s.maxWait)
	}
	s.q.limit = s.limit
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.client == nil {
		s.owned = true
		s.client = &http.Client{
			Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true, IdleConnTimeout: 90 * time.Second},
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		}
	}
	ns := cfg.MetricsNamespace
	if ns == "" {
		ns = "presenced"
	}
	if s.m, err = newMetrics(cfg.Registerer, ns, s.limit); err != nil {
		return nil, err
	}
	return s, nil
}

// checkURL parses raw and requires an absolute http or https URL with a host.
func checkURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("webhook: no URL")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("webhook: URL: %w", err)
	}
	if !u.IsAbs() || u.Host == "" {
		return nil, fmt.Errorf("webhook: URL %q is not absolute (want http://host/... or https://host/...)", u.Redacted())
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("webhook: URL %q: scheme %q is not http or https", u.Redacted(), u.Scheme)
	}
	return u, nil
}

// signingKey returns the key of the webhook-signature header for secret:
// nil for "", the decoded bytes for "whsec_<base64>", else secret's bytes.
// Its errors never quote the secret.
func signingKey(secret string) ([]byte, error) {
	if secret == "" {
		return nil, nil
	}
	enc, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return []byte(secret), nil
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, fmt.Errorf("webhook: Secret: what follows %s is not standard padded base64: %w", SecretPrefix, err)
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("webhook: Secret: no key after %s", SecretPrefix)
	}
	return key, nil
}

func orDefault[T int | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// Add queues events behind those already waiting, in their order. It never
// waits on the network or on Run: past Config.Queue waiting events it drops
// the oldest ones (which may be some of these), counts them and leaves the
// log line to Run, at most one every 10 s, so a long outage does not log
// once per event.
func (s *Sender) Add(events ...Event) {
	if len(events) == 0 {
		return
	}
	s.mu.Lock()
	gone := false
	if s.onDone != nil {
		held, given := s.q.dropping(events)
		s.gone = givenIDs(s.gone, held, given)
		gone = len(s.gone) > 0
	}
	dropped := s.q.push(events)
	s.unlogged += int64(dropped)
	s.dropped += int64(dropped)
	s.m.queue.Set(float64(s.q.n))
	s.mu.Unlock()
	if dropped > 0 {
		s.m.dropped.Add(float64(dropped))
	}
	if gone {
		select {
		case s.goneWake <- struct{}{}:
		default: // already told
		}
	}
	select {
	case s.wake <- struct{}{}:
	default: // Run is already woken
	}
}

// givenIDs appends to ids those of evs that Add was given.
func givenIDs(ids []string, evs ...[]Event) []string {
	for _, list := range evs {
		for _, e := range list {
			if e.ID != "" {
				ids = append(ids, e.ID)
			}
		}
	}
	return ids
}
