package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// config is one run.
type config struct {
	seed      uint64
	mode      string // single, cluster or sentinel
	kinds     []kind
	plan      []step           // a fixed schedule; nil: faults drawn from kinds
	span      time.Duration    // the schedule's length
	gap       [2]time.Duration // between a fault's heal and the next one
	clients   int
	lifetime  [2]time.Duration // of a churning connection
	bin       string           // presenced
	redis     string           // redis-server
	redisCLI  string
	dir       string // logs
	replay    bool   // run the replaying backend (replay.go)
	eventsMax int    // -events-max of the nodes; 0: the server's default
	logf      func(format string, args ...any)
}

// channels are the channels clients join.
var channels = []string{"ch0", "ch1", "ch2", "ch3", "ch4", "ch5", "ch6", "ch7"}

const nodes = 3

// warmup is how long clients connect before the first fault.
const warmup = 5 * time.Second

// result is a finished run: its history and what the checker found.
type result struct {
	history   *history
	anomalies []anomaly
}

// run starts the world, the clients, the receiver and the nemesis, runs
// the schedule, heals, settles, and checks.
func run(ctx context.Context, cfg config) (*result, error) {
	if cfg.plan != nil {
		cfg.kinds = plannedKinds(cfg.plan)
	}
	for _, k := range cfg.kinds {
		if !slices.Contains(modeKinds[cfg.mode], k) {
			return nil, fmt.Errorf("fault kind %q does not apply to mode %q (it takes %v)", k, cfg.mode, modeKinds[cfg.mode])
		}
	}
	if len(cfg.kinds) == 0 {
		return nil, errors.New("no fault kinds")
	}
	w, rc, err := startWorld(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer rc.close()
	defer w.stop()

	tr := &truth{}
	tabs := population(cfg.clients, nodes, channels, cfg.seed, cfg.lifetime)
	runCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	churnCtx, stopChurn := context.WithCancel(runCtx)
	defer stopChurn()
	var churners, stayers sync.WaitGroup
	start := time.Now()
	var rp *replayer
	replayCtx, stopReplay := context.WithCancel(runCtx)
	defer stopReplay()
	var replaying sync.WaitGroup
	if cfg.replay {
		// Before the clients: its first read, from the start of the log, sees every edge.
		rp = newReplayer(w.addrs, w.apiKey, downStretches(cfg.seed, start, warmup, cfg.span), cfg.seed, cfg.logf)
		var ds []string
		for _, d := range rp.downs {
			ds = append(ds, fmt.Sprintf("%.0f-%.0f s", d[0].Sub(start).Seconds(), d[1].Sub(start).Seconds()))
		}
		cfg.logf("replay: down %s", strings.Join(ds, ", "))
		replaying.Go(func() { rp.run(replayCtx) })
	}
	for _, t := range tabs {
		t.nodes, t.truth = w.addrs, tr
		wg := &stayers
		if t.churn {
			wg = &churners
		}
		wg.Go(func() { t.run(runCtx, churnCtx) })
	}
	faults, over := schedule(cfg.seed, cfg.kinds, nodes, warmup, cfg.span, cfg.gap), "drawn over "+cfg.span.String()
	if cfg.plan != nil {
		faults, over = planned(cfg.seed, cfg.plan, nodes, warmup, cfg.gap), "fixed"
	}
	cfg.logf("seed %d, mode %s: %d clients, %d faults %s, logs in %s", cfg.seed, cfg.mode, cfg.clients, len(faults), over, cfg.dir)
	w.nemesis(runCtx, start, faults)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg.logf("%6.2f s healed; churn stops, settling", time.Since(start).Seconds())
	stopChurn()
	churners.Wait()
	end, found := w.settle(ctx, faults, tr, rc)
	h := &history{start: start, end: end, ivs: tr.snapshot(end), posts: rc.log(), faults: faults, found: found}
	if rp != nil {
		stopReplay()
		replaying.Wait()
		fctx, cancel := context.WithTimeout(ctx, time.Minute)
		if err := rp.finish(fctx, end); err != nil {
			cfg.logf("replay: no final catch-up: %v", err)
		}
		cancel()
		h.replay = &rp.rec
	}
	stopAll()
	stayers.Wait()
	found = h.check()
	if err := h.save(cfg.dir); err != nil {
		cfg.logf("saving the history: %v", err)
	}
	return &result{history: h, anomalies: found}, nil
}

// startWorld starts the webhook receiver (its secret and its refusals
// drawn from the seed) and the world of cfg.mode with its nodes on it. The
// caller stops both; an error leaves nothing running.
func startWorld(ctx context.Context, cfg config) (*world, *receiver, error) {
	key := make([]byte, 24)
	kr := rand.New(rand.NewPCG(cfg.seed, 4))
	for i := range key {
		key[i] = byte(kr.Uint32())
	}
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	for i := range key {
		key[i] = byte(kr.Uint32())
	}
	apiKey := base64.RawURLEncoding.EncodeToString(key)
	rc, err := newReceiver(secret, 0.05, cfg.seed)
	if err != nil {
		return nil, nil, err
	}
	w := &world{mode: cfg.mode, bin: cfg.bin, redisServer: cfg.redis, redisCLI: cfg.redisCLI, dir: cfg.dir,
		hook: rc.url, secret: secret, apiKey: apiKey, eventsMax: cfg.eventsMax, logf: cfg.logf}
	if err := w.start(ctx, nodes); err != nil {
		w.stop()
		rc.close()
		return nil, nil, err
	}
	return w, rc, nil
}

// settle waits a recovery after the last fault, then for every node to be
// ready (a minute at most: a subscription found silent is made again after
// two leases) and for each node's API to agree with the clients (5 s at
// most), then for the webhook to fall quiet. It returns the moment of the
// agreement, the end of the history, and what did not settle.
func (w *world) settle(ctx context.Context, faults []*fault, tr *truth, rc *receiver) (time.Time, []anomaly) {
	var last time.Time
	if n := len(faults); n > 0 {
		last = faults[n-1].end
	}
	sleep(ctx, time.Until(last.Add(recovery)))
	var found []anomaly
	var unready error
	_ = waitUntil(ctx, time.Minute, func() bool { unready = w.allReady(ctx); return unready == nil })
	if unready != nil {
		found = append(found, anomaly{at: time.Now(), kind: "not ready", what: unready.Error()})
	}
	var apiDiff string
	_ = waitUntil(ctx, 5*time.Second, func() bool {
		apiDiff = w.compareAPI(ctx, tr)
		return apiDiff == ""
	})
	end := time.Now()
	if apiDiff != "" {
		found = append(found, anomaly{at: end, kind: "api state", what: apiDiff})
	}
	_ = waitUntil(ctx, time.Minute, func() bool { return time.Since(rc.lastPost()) > 3*time.Second })
	return end, found
}

// allReady says why a node's /readyz does not answer 200, if one does not.
func (w *world) allReady(ctx context.Context) error {
	var errs []error
	for i := range w.addrs {
		if _, err := w.apiGet(ctx, i, "/readyz"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// compareAPI compares each node's online users and channel members with
// the clients' truth now; "" when they all agree.
func (w *world) compareAPI(ctx context.Context, tr *truth) string {
	now := time.Now()
	h := &history{end: now, ivs: tr.snapshot(now)}
	users, members := h.expected()
	var diffs []string
	for i := range w.addrs {
		var p struct{ Users []string }
		if err := w.getJSON(ctx, i, "/api/presence?limit=1000", &p); err != nil {
			diffs = append(diffs, err.Error())
			continue
		}
		slices.Sort(p.Users)
		if d := diff(users, p.Users); d != "" {
			diffs = append(diffs, fmt.Sprintf("node %s online: %s", nodeName(i), d))
		}
		for _, ch := range channels {
			var c struct{ Members []string }
			if err := w.getJSON(ctx, i, "/api/channels/"+ch+"?limit=1000", &c); err != nil {
				diffs = append(diffs, err.Error())
				continue
			}
			slices.Sort(c.Members)
			if d := diff(members[ch], c.Members); d != "" {
				diffs = append(diffs, fmt.Sprintf("node %s %s: %s", nodeName(i), ch, d))
			}
		}
	}
	return strings.Join(diffs, "; ")
}

func (w *world) getJSON(ctx context.Context, i int, path string, v any) error {
	b, err := w.apiGet(ctx, i, path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("node %s %s: %w", nodeName(i), path, err)
	}
	return nil
}

// buildPresenced builds cmd/presenced of the main module into dir.
func buildPresenced(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/presenced/presenced").Output()
	if err != nil {
		return "", fmt.Errorf("finding the main module: %w", err)
	}
	bin := filepath.Join(dir, "presenced")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/presenced")
	build.Dir = strings.TrimSpace(string(out))
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/presenced: %w\n%s", err, out)
	}
	return bin, nil
}
