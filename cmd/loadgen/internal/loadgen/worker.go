package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/presenced/presenced/protocol"
)

// counters are cumulative over a worker's life.
type counters struct {
	Dialed      int64 `json:"dialed"`
	Connected   int64 `json:"connected"`
	FailedDials int64 `json:"failed_dials"`
	Open        int64 `json:"open"`
	Closed      int64 `json:"closed"`
	Errors      int64 `json:"errors"`
	Keepalives  int64 `json:"keepalives"` // frames sent: pong replies and app pings
	Received    int64 `json:"received"`   // data frames received (text and binary)
	PingsIn     int64 `json:"pings_in"`   // server pings received
	LatePings   int64 `json:"late_pings"` // stream pings sent over slowAfter past their time
	SlowPings   int64 `json:"slow_pings"` // stream pings whose round trip took over slowAfter
}

// report is one line a worker writes to its coordinator.
type report struct {
	Kind   string `json:"kind"` // progress, ramped or final
	Worker int    `json:"worker"`
	counters
	TimeoutMS    int64            `json:"timeout_ms,omitempty"`
	Silent       int              `json:"silent,omitempty"`
	SilentClosed int              `json:"silent_closed,omitempty"`
	SilentOther  int              `json:"silent_other,omitempty"`
	FalseClosed  int              `json:"false_closed,omitempty"`
	DetectMS     []float64        `json:"detect_ms,omitempty"`
	CloseCodes   map[string]int   `json:"close_codes,omitempty"`
	FrameTypes   map[string]int64 `json:"frame_types,omitempty"` // data frames received by "type"
	PerClient    []int64          `json:"per_client,omitempty"`  // data frames received by each client that connected
	Err          string           `json:"err,omitempty"`
}

const (
	kindProgress = "progress"
	kindRamped   = "ramped"
	kindFinal    = "final"

	idleCloseCode = protocol.CloseIdleTimeout
	writeWait     = 5 * time.Second
	dialTimeout   = 10 * time.Second
)

var appPing = protocol.MustEncode(protocol.Ping{}).Data

// frameTypes are the "type"s of server frames counted by name; any other
// text frame counts as "other", a binary frame as "binary", a text frame
// without a readable type as "invalid".
var frameTypes = []string{
	"welcome", "joined", "left", "presence", "status", "watching",
	"chat", "publish", "message", "pong", "error", "close",
}

const (
	typeOther   = "other"
	typeBinary  = "binary"
	typeInvalid = "invalid"
)

// typeCounters counts received frames by type; the map is fixed at creation,
// so lookups need no lock.
type typeCounters map[string]*atomic.Int64

func newTypeCounters() typeCounters {
	t := typeCounters{}
	for _, k := range append(slices.Clone(frameTypes), typeOther, typeBinary, typeInvalid) {
		t[k] = new(atomic.Int64)
	}
	return t
}

func (t typeCounters) add(typ string) {
	c, ok := t[typ]
	if !ok {
		c = t[typeOther]
	}
	c.Add(1)
}

// snapshot returns the non-zero counts.
func (t typeCounters) snapshot() map[string]int64 {
	out := map[string]int64{}
	for k, c := range t {
		if n := c.Load(); n > 0 {
			out[k] = n
		}
	}
	return out
}

var typePrefix = []byte(`{"type":"`)

// frameType returns the top-level "type" of a JSON object. Servers written in
// Go usually put it first, which is read without decoding; anything else is
// decoded, because a nested object may have a "type" of its own.
func frameType(msg []byte) (string, bool) {
	if rest, ok := bytes.CutPrefix(msg, typePrefix); ok {
		if i := bytes.IndexByte(rest, '"'); i >= 0 && !bytes.Contains(rest[:i], []byte{'\\'}) {
			return string(rest[:i]), true
		}
	}
	var m struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(msg, &m); err != nil || m.Type == nil {
		return "", false
	}
	return *m.Type, true
}

// client is one raw gorilla connection (worker_ws.go), or one stream and
// its POSTs (worker_sse.go). The load generator does not use package
// client: it measures how the server treats connections that idle, go
// silent and get closed, so it must see every close instead of having it
// hidden by a reconnect and keep no presence state per connection. Its
// frames are package protocol's.
type client struct {
	conn     *websocket.Conn // nil for a stream
	sse      *sseLink        // nil for a WebSocket
	silent   atomic.Bool
	closed   atomic.Bool
	lastSent atomic.Int64 // unix nanoseconds of the last frame this client sent
	received atomic.Int64 // data frames received
	nextPing int64        // unix nanoseconds of the next app ping; its sender's own
}

type worker struct {
	spec    Spec
	workers int
	log     *slog.Logger
	out     *json.Encoder
	outMu   sync.Mutex

	c     counters // updated atomically
	types typeCounters

	mu          sync.Mutex
	clients     []*client
	ending      bool // after the deadline closes are ours, not the server's
	timeoutMS   int64
	silent      int
	silentDone  int
	silentOther int
	falseClosed int
	detect      []float64
	closeCodes  map[string]int
}

// RunWorker opens spec's clients, keeps them until spec.Start+spec.Duration
// (or ctx is done), and writes JSON reports to out: progress every second, one
// "ramped" when all of its dials are done, and one "final". workers is the
// number of workers in the run, needed to place this worker's clients on the
// common ramp.
func RunWorker(ctx context.Context, spec Spec, workers int, out io.Writer, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &worker{
		spec: spec, workers: workers, log: log, out: json.NewEncoder(out),
		closeCodes: map[string]int{}, types: newTypeCounters(),
	}
	deadline := spec.Start.Add(spec.Duration)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	dial := w.dialer()
	progressDone := make(chan struct{})
	stopProgress := make(chan struct{})
	go func() {
		defer close(progressDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				w.emit(report{Kind: kindProgress})
			}
		}
	}()

	pingDone := make(chan struct{})
	go func() {
		defer close(pingDone)
		w.appPings(ctx)
	}()
	var readers sync.WaitGroup
	w.ramp(ctx, dial, &readers)
	rampEnd := spec.Start.Add(spec.Ramp)
	select {
	case <-time.After(time.Until(rampEnd)):
	case <-ctx.Done():
	}
	if ctx.Err() == nil {
		w.silence()
	}
	w.emit(report{Kind: kindRamped})
	<-ctx.Done()
	<-pingDone

	final := w.finish()
	close(stopProgress)
	<-progressDone
	w.emit(final)

	// Give the coordinator a moment to sample the server before the closes
	// below make it work.
	time.Sleep(spec.Linger)
	w.closeAll()
	readers.Wait()
	return nil
}

func (w *worker) emit(r report) {
	r.Worker = w.spec.Worker
	frozen := r.Received
	r.counters = w.snapshot()
	if r.Kind == kindFinal {
		r.Received = frozen // as of the deadline, with FrameTypes and PerClient
	}
	w.outMu.Lock()
	defer w.outMu.Unlock()
	if err := w.out.Encode(r); err != nil {
		w.log.Error("write report", "err", err)
	}
}

func (w *worker) snapshot() counters {
	return counters{
		Dialed:      atomic.LoadInt64(&w.c.Dialed),
		Connected:   atomic.LoadInt64(&w.c.Connected),
		FailedDials: atomic.LoadInt64(&w.c.FailedDials),
		Open:        atomic.LoadInt64(&w.c.Open),
		Closed:      atomic.LoadInt64(&w.c.Closed),
		Errors:      atomic.LoadInt64(&w.c.Errors),
		Keepalives:  atomic.LoadInt64(&w.c.Keepalives),
		Received:    atomic.LoadInt64(&w.c.Received),
		PingsIn:     atomic.LoadInt64(&w.c.PingsIn),
		LatePings:   atomic.LoadInt64(&w.c.LatePings),
		SlowPings:   atomic.LoadInt64(&w.c.SlowPings),
	}
}

// dialFunc opens the client with run-wide index g and starts its reader.
type dialFunc func(ctx context.Context, g int, readers *sync.WaitGroup)

// dialer returns how this worker's clients are opened, spread over the
// source addresses.
func (w *worker) dialer() dialFunc {
	if w.spec.Transport == TransportSSE {
		links := w.sseDialers()
		return func(ctx context.Context, g int, readers *sync.WaitGroup) {
			w.dialSSE(ctx, links[g%len(links)], g, readers)
		}
	}
	ds := w.dialers()
	return func(ctx context.Context, g int, readers *sync.WaitGroup) {
		w.dial(ctx, ds[g%len(ds)], g, readers)
	}
}

// sourceAddrs returns the local address of each source, one nil (the
// kernel's choice) when there are none.
func (w *worker) sourceAddrs() []net.Addr {
	if len(w.spec.Sources) == 0 {
		return []net.Addr{nil}
	}
	as := make([]net.Addr, len(w.spec.Sources))
	for i, s := range w.spec.Sources {
		as[i] = &net.TCPAddr{IP: net.ParseIP(s)}
	}
	return as
}

// ramp dials the worker's clients at their places on the common ramp, with
// at most DialLimit dials in flight.
func (w *worker) ramp(ctx context.Context, dial dialFunc, readers *sync.WaitGroup) {
	sem := make(chan struct{}, w.spec.DialLimit)
	var dials sync.WaitGroup
	total := max(w.spec.TotalConns, 1)
	for i := range w.spec.Conns {
		g := w.spec.globalIndex(i, w.workers)
		at := w.spec.Start.Add(time.Duration(int64(w.spec.Ramp) * int64(g) / int64(total)))
		if d := time.Until(at); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		dials.Add(1)
		go func() {
			defer dials.Done()
			defer func() { <-sem }()
			dial(ctx, g, readers)
		}()
	}
	dials.Wait()
}

// clientURL is spec.URL with the user and channels of client g.
func (w *worker) clientURL(g int) (string, error) {
	u, err := url.Parse(w.spec.URL)
	if err != nil {
		return "", fmt.Errorf("parse url: %w", err)
	}
	q := u.Query()
	q.Set("uid", w.spec.uid(g))
	if cs := w.spec.channels(g); len(cs) > 0 {
		q.Set("channels", strings.Join(cs, ","))
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func (w *worker) dialFailed(g int, err error) {
	atomic.AddInt64(&w.c.FailedDials, 1)
	atomic.AddInt64(&w.c.Errors, 1)
	if atomic.LoadInt64(&w.c.FailedDials) <= 5 {
		w.log.Warn("dial failed", "uid", w.spec.uid(g), "err", err)
	}
}

// opened counts c as connected and open and keeps it for the run.
func (w *worker) opened(c *client) {
	atomic.AddInt64(&w.c.Connected, 1)
	atomic.AddInt64(&w.c.Open, 1)
	w.mu.Lock()
	w.clients = append(w.clients, c)
	w.mu.Unlock()
}

// count counts one whole frame of kind received by c, in the totals and by
// type, under w.mu so that finish sees them agree.
func (w *worker) count(c *client, kind string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	atomic.AddInt64(&w.c.Received, 1)
	c.received.Add(1)
	w.types.add(kind)
}

// ended classifies the end of c at time at, with the close code the server
// sent (-1: none) and the error that ended its reads: a silent client closed
// for idling, a silent client ended otherwise, or a false close.
func (w *worker) ended(c *client, at time.Time, closeCode int, err error) {
	c.closed.Store(true)
	atomic.AddInt64(&w.c.Open, -1)
	atomic.AddInt64(&w.c.Closed, 1)
	code := "eof"
	if closeCode >= 0 {
		code = strconv.Itoa(closeCode)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ending {
		return
	}
	w.closeCodes[code]++
	switch {
	case c.silent.Load() && closeCode == idleCloseCode:
		w.silentDone++
		w.detect = append(w.detect, float64(at.UnixNano()-c.lastSent.Load())/1e6)
	case c.silent.Load():
		w.silentOther++
		atomic.AddInt64(&w.c.Errors, 1)
	default:
		w.falseClosed++
		atomic.AddInt64(&w.c.Errors, 1)
		if w.falseClosed <= 5 {
			w.log.Warn("live client closed", "code", code, "since_last_sent", at.Sub(time.Unix(0, c.lastSent.Load())).Round(time.Millisecond), "err", err)
		}
	}
}

func (w *worker) welcome(msg []byte) {
	f, err := protocol.ParseServer(msg)
	m, ok := f.(*protocol.Welcome)
	if err != nil || !ok {
		return
	}
	w.mu.Lock()
	w.timeoutMS = max(w.timeoutMS, m.TimeoutMS)
	w.mu.Unlock()
}

// silence makes spec.Silent of the open clients stop answering and sending.
// They are drawn at random (seeded by the worker, so runs repeat), not every
// k-th: a stride would line up with user IDs (client i is user i mod Users)
// and silence whole users at once.
func (w *worker) silence() {
	w.mu.Lock()
	defer w.mu.Unlock()
	var open []*client
	for _, c := range w.clients {
		if !c.closed.Load() {
			open = append(open, c)
		}
	}
	n := min(w.spec.Silent, len(open))
	rng := rand.New(rand.NewPCG(uint64(w.spec.Worker), uint64(w.spec.TotalConns)))
	for _, k := range rng.Perm(len(open))[:n] {
		open[k].silent.Store(true)
	}
	w.silent = n
}

// finish freezes the outcome at the deadline.
func (w *worker) finish() report {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ending = true
	codes := make(map[string]int, len(w.closeCodes))
	for k, v := range w.closeCodes {
		codes[k] = v
	}
	perClient := make([]int64, len(w.clients))
	for i, c := range w.clients {
		perClient[i] = c.received.Load()
	}
	return report{
		counters: counters{Received: atomic.LoadInt64(&w.c.Received)},
		Kind:     kindFinal, TimeoutMS: w.timeoutMS, Silent: w.silent,
		SilentClosed: w.silentDone, SilentOther: w.silentOther, FalseClosed: w.falseClosed,
		DetectMS: append([]float64(nil), w.detect...), CloseCodes: codes,
		FrameTypes: w.types.snapshot(), PerClient: perClient,
	}
}

// closeAll ends every connection: a WebSocket with a normal close frame, a
// stream by hanging up.
func (w *worker) closeAll() {
	w.mu.Lock()
	cs := w.clients
	w.mu.Unlock()
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "loadgen done")
	for _, c := range cs {
		if c.sse != nil {
			c.sse.close()
			continue
		}
		if !c.closed.Load() {
			_ = c.conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
		}
		if err := c.conn.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			w.log.Debug("close", "err", fmt.Errorf("close client: %w", err))
		}
	}
}
