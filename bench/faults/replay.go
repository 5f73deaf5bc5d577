package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"
)

// replayer is the second backend: it keeps who is online and who is in
// which channel from the log of edges alone (GET /api/events), never from
// the webhook. It goes down for drawn stretches; back up, it reads on from
// its cursor, and when the log answers 410 it takes a snapshot (the
// presence listing and each channel's pages) and reads on from the
// snapshot's cursor. Each request goes to a node drawn at random, another
// one if that one does not answer. One goroutine runs it at a time.
type replayer struct {
	nodes   []string // host:port of each node
	key     string   // the API key
	downs   [][2]time.Time
	rnd     *rand.Rand
	client  *http.Client
	logf    func(format string, args ...any)
	page    int // members a channel page asks for
	st      *replayState
	cursor  string
	started bool // the first read was made: cursor is the log's
	rec     replayRecord
}

// replayRecord is what the replayer did, for the checker.
type replayRecord struct {
	events    []replayed
	ids       map[string]int // each event id read, to the segment that read it
	segments  []segment
	marks     []mark
	catchUps  []catchUp
	final     *mark
	problems  []anomaly // order rules broken as the edges were applied, ids read twice
	noLog     time.Time // when a node first answered 501
	gone      int       // 410s
	snapshots int
}

// replayed is one event as the log gave it.
type replayed struct {
	event
	segment int
}

// segment is a stretch of the log read without a break: from the start of
// the log, or from a snapshot whose presence listing came back at start,
// to the last read, sent at quiet, that found nothing newer.
type segment struct {
	start, quiet time.Time
	snapshot     bool
	users        []string            // a snapshot's online users
	members      map[string][]string // and its channels' members
}

// catchUp is one return from a down stretch: from up to the first read
// that found nothing newer, at end.
type catchUp struct {
	down      [2]time.Time
	end       time.Time
	events    int
	gone      int
	snapshots int
}

// Bounds of the replayer: how long it waits for a node, between reads
// while up, and between marks of its state; replayDelay is how long an
// edge may take to show in the log once made (about a second with -redis,
// so that a write under way in one shard is not overtaken).
const (
	replayDelay   = 2 * time.Second
	replayTimeout = 3 * time.Second
	replayPoll    = 500 * time.Millisecond
	replayMarks   = 2 * time.Second
	replayLimit   = 1000 // events a read asks for
	replayReads   = 20   // reads of one poll while up, at most
)

// errNoLog is a node's 501: its engine keeps no log, so there is nothing
// to replay.
var errNoLog = errors.New("the node keeps no log of edges (501)")

func newReplayer(nodes []string, key string, downs [][2]time.Time, seed uint64, logf func(string, ...any)) *replayer {
	return &replayer{nodes: nodes, key: key, downs: downs, rnd: rand.New(rand.NewPCG(seed, 8)),
		client: &http.Client{Timeout: replayTimeout}, logf: logf, page: 50, st: newReplayState(),
		rec: replayRecord{ids: map[string]int{}, segments: []segment{{}}}}
}

// downStretches draws from seed when the replayer is down, in proportion
// to span: up a 30th to a 7th of it, then down a 20th to three tenths
// (in a 10-minute run, up 20-86 s, then down 30 s to 3 min), from warmup
// on, each down over by span.
func downStretches(seed uint64, start time.Time, warmup, span time.Duration) [][2]time.Time {
	r := rand.New(rand.NewPCG(seed, 6))
	var out [][2]time.Time
	for t := warmup; ; {
		t += between(r, span/30, span/7)
		d := min(between(r, span/20, span*3/10), span-t)
		if d < span/20 {
			return out
		}
		out = append(out, [2]time.Time{start.Add(t), start.Add(t + d)})
		t += d
	}
}

// run follows the log while up and sits out each down stretch, until ctx
// ends. A node's 501 ends it: there is no log to follow.
func (rp *replayer) run(ctx context.Context) {
	for _, d := range rp.downs {
		if err := rp.follow(ctx, d[0]); err != nil {
			return
		}
		if !sleep(ctx, time.Until(d[1])) {
			return
		}
		rp.logf("replay: up after %v down", d[1].Sub(d[0]).Round(time.Second))
		before := rp.rec
		end, err := rp.upToDate(ctx, time.Time{})
		if err != nil {
			return
		}
		rp.rec.catchUps = append(rp.rec.catchUps, catchUp{down: d, end: end, events: len(rp.rec.events) - len(before.events),
			gone: rp.rec.gone - before.gone, snapshots: rp.rec.snapshots - before.snapshots})
	}
	_ = rp.follow(ctx, time.Time{})
}

// follow reads the log every replayPoll until until (zero: until ctx
// ends), each time until a read finds nothing newer (the edges keep
// coming while clients churn, so a read that finds none is one sent right
// after another), marking its state then, every replayMarks at most; it
// returns only errNoLog.
func (rp *replayer) follow(ctx context.Context, until time.Time) error {
	var last time.Time
	for until.IsZero() || time.Now().Before(until) {
		for range replayReads {
			done, at, err := rp.read(ctx)
			if errors.Is(err, errNoLog) {
				return err
			}
			if done && at.Sub(last) >= replayMarks {
				rp.mark(at)
				last = at
			}
			if done || err != nil {
				break
			}
		}
		if !sleep(ctx, replayPoll) {
			return nil
		}
	}
	return nil
}

// upToDate reads until a read sent after since finds nothing newer,
// trying again on errors, and returns when that read was sent; it marks
// the state then. An error is ctx's or errNoLog.
func (rp *replayer) upToDate(ctx context.Context, since time.Time) (time.Time, error) {
	for {
		done, at, err := rp.read(ctx)
		if errors.Is(err, errNoLog) {
			return time.Time{}, err
		}
		if done && !at.Before(since) {
			rp.mark(at)
			return at, nil
		}
		if err != nil && !sleep(ctx, replayPoll) {
			return time.Time{}, ctx.Err()
		}
	}
}

// read reads the log once from the cursor (a snapshot first on a 410) and
// applies what it gives; done says it found nothing newer, at when that
// read was sent.
func (rp *replayer) read(ctx context.Context) (done bool, at time.Time, err error) {
	q := url.Values{"limit": {fmt.Sprint(replayLimit)}}
	if rp.started {
		q.Set("after", rp.cursor)
	}
	var b struct {
		Events []event
		Next   string
		Oldest string
	}
	at = time.Now()
	status, err := rp.get(ctx, "/api/events?"+q.Encode(), &b)
	switch {
	case err != nil:
		return false, at, err
	case status == http.StatusGone:
		rp.rec.gone++
		rp.logf("replay: 410 from cursor %q (oldest %q); snapshot", rp.cursor, b.Oldest)
		return false, at, rp.snapshot(ctx)
	}
	rp.started = true
	seg := len(rp.rec.segments) - 1
	for _, e := range b.Events {
		rp.apply(e, seg)
	}
	done = b.Next == rp.cursor
	rp.cursor = b.Next
	if done {
		rp.rec.segments[seg].quiet = at
	}
	return done, at, nil
}

func (rp *replayer) apply(e event, seg int) {
	at := time.UnixMilli(e.At)
	if s, ok := rp.rec.ids[e.ID]; ok {
		rp.rec.problems = append(rp.rec.problems, anomaly{at: at, key: keyOf(e), kind: "replayed twice",
			what: fmt.Sprintf("%s %s in segment %d, read before in segment %d", e.Type, e.ID, seg, s)})
	}
	rp.rec.ids[e.ID] = seg
	rp.rec.events = append(rp.rec.events, replayed{e, seg})
	for _, b := range rp.st.apply(e) {
		rp.rec.problems = append(rp.rec.problems, anomaly{at: at, key: keyOf(e), kind: "replay " + b[0],
			what: fmt.Sprintf("%s (segment %d)", b[1], seg)})
	}
}

// snapshot takes the presence listing and every channel's pages, resets
// the state to them, and reads on from the listing's cursor: it is the
// first taken, and every edge after it sets what it names, so edges a
// later page already holds are applied again harmlessly.
func (rp *replayer) snapshot(ctx context.Context) error {
	var p struct {
		Count  int
		Users  []string
		Cursor string
	}
	if err := rp.getOK(ctx, "/api/presence?limit=1000", &p); err != nil {
		return err
	}
	at := time.Now() // every edge made after it comes after the cursor
	if p.Cursor == "" || p.Count > len(p.Users) {
		return fmt.Errorf("snapshot: cursor %q, %d of %d users listed", p.Cursor, len(p.Users), p.Count)
	}
	members := map[string][]string{}
	for _, ch := range channels {
		after := ""
		for {
			var c struct {
				Members []string
				Next    string
			}
			q := url.Values{"limit": {fmt.Sprint(rp.page)}, "after": {after}}
			if err := rp.getOK(ctx, "/api/channels/"+ch+"?"+q.Encode(), &c); err != nil {
				return err
			}
			members[ch] = append(members[ch], c.Members...)
			if c.Next == "" {
				break
			}
			after = c.Next
		}
	}
	rp.st.reset(p.Users, members)
	rp.cursor, rp.started = p.Cursor, true
	rp.rec.snapshots++
	rp.rec.segments = append(rp.rec.segments, segment{start: at, snapshot: true, users: p.Users, members: members})
	return nil
}

func (rp *replayer) mark(at time.Time) {
	rp.rec.marks = append(rp.rec.marks, mark{at: at, on: rp.st.keys()})
}

// finish catches up once more after the run settled at end, allowing for
// the log's delay, and keeps that state as the final one.
func (rp *replayer) finish(ctx context.Context, end time.Time) error {
	if _, err := rp.upToDate(ctx, end.Add(replayDelay)); err != nil {
		return err
	}
	rp.rec.final = &rp.rec.marks[len(rp.rec.marks)-1]
	return nil
}

// getOK is get for a 200 only.
func (rp *replayer) getOK(ctx context.Context, path string, v any) error {
	status, err := rp.get(ctx, path, v)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("%s: status %d", path, status)
	}
	return err
}

// get asks a node drawn at random for path with the API key, the others
// in turn while one does not answer, and decodes a 200's or a 410's body
// into v. A 501 is errNoLog; another status is an error.
func (rp *replayer) get(ctx context.Context, path string, v any) (int, error) {
	var errs []error
	first := rp.rnd.IntN(len(rp.nodes))
	for i := range rp.nodes {
		addr := rp.nodes[(first+i)%len(rp.nodes)]
		status, body, err := rp.getFrom(ctx, addr, path)
		switch {
		case err != nil:
			errs = append(errs, err)
			continue
		case status == http.StatusNotImplemented:
			if rp.rec.noLog.IsZero() {
				rp.rec.noLog = time.Now()
			}
			return status, errNoLog
		case status != http.StatusOK && status != http.StatusGone:
			errs = append(errs, fmt.Errorf("%s%s: status %d: %.200s", addr, path, status, body))
			continue
		}
		if err := json.Unmarshal(body, v); err != nil {
			return status, fmt.Errorf("%s%s: %w", addr, path, err)
		}
		return status, nil
	}
	return 0, errors.Join(errs...)
}

func (rp *replayer) getFrom(ctx context.Context, addr, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "apikey "+rp.key)
	res, err := rp.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, err
}
