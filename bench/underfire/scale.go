package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// churn: many heartbeat users come and go; what heap is left once they are
// all gone.
func churn(r *run) ([]row, error) {
	p, err := r.startPresenced("churn", "-slots", "11", "-tick", "200ms")
	if err != nil {
		return nil, err
	}
	defer p.stop()
	base := p.http()
	idle := metrics(base)
	total := r.churnUsers
	const batch = 50_000
	start := time.Now()
	failed := 0
	peak := 0
	for from := 0; from < total; from += batch {
		failed += heartbeats(base, from, min(from+batch, total), 32, func(i int) string { return "uid=u-" + strconv.Itoa(i) })
		peak = max(peak, onlineCount(base))
		progress("churn: %d heartbeats, %d online", min(from+batch, total), peak)
	}
	posted := time.Since(start)
	peakHeap := metrics(base)
	zero := waitFor(60*time.Second, func() bool { return onlineCount(base) == 0 })
	emptyAt := time.Since(start)
	time.Sleep(3 * time.Second)
	settled := metrics(base)
	// Make the GC run twice more: scrapes allocate, and nothing else does.
	gcs := settled["go_gc_duration_seconds_count"]
	var after map[string]float64
	scrapes := 0
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); scrapes++ {
		after = metrics(base)
		if after["go_gc_duration_seconds_count"] >= gcs+2 {
			break
		}
	}
	time.Sleep(time.Second)
	after = metrics(base)
	r.figures("churn", "%d users by heartbeat in %v (%d failed, at most %d online at once); online 0: %v at %v; "+
		"idle: %s; at the end of the posts: %s; 3 s after empty: %s; after %d scrapes: %s; RSS %.0f MB",
		total, posted.Round(time.Millisecond), failed, peak, zero, emptyAt.Round(time.Millisecond),
		heapFigures(idle), heapFigures(peakHeap), heapFigures(settled), scrapes, heapFigures(after), rssMB(p.Cmd.Process.Pid))
	return []row{{
		"8. live heap after 500,000 users came and went",
		fmt.Sprintf("heap inuse %.1f MB, alloc %.1f MB (idle server: %.1f / %.1f MB; %.0f MB inuse at the end of the churn)",
			after["go_memstats_heap_inuse_bytes"]/1e6, after["go_memstats_heap_alloc_bytes"]/1e6,
			idle["go_memstats_heap_inuse_bytes"]/1e6, idle["go_memstats_heap_alloc_bytes"]/1e6,
			peakHeap["go_memstats_heap_inuse_bytes"]/1e6),
		fmt.Sprintf("`-slots 11 -tick 200ms`; %d POST /api/heartbeat?uid=u-N on 32 keep-alive connections in %v (at most %d online at once); once /api/presence counts 0, /metrics scraped until two more GCs ran", total, posted.Round(time.Second), peak),
	}}, nil
}

func heapFigures(m map[string]float64) string {
	return fmt.Sprintf("heap inuse %.1f MB, alloc %.1f MB (GCs %g)",
		m["go_memstats_heap_inuse_bytes"]/1e6, m["go_memstats_heap_alloc_bytes"]/1e6, m["go_gc_duration_seconds_count"])
}

// rssMB is the resident memory of process pid, or 0 if /proc does not say.
func rssMB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return float64(kb) / 1024
		}
	}
	return 0
}

// listLatency: how long GET /api/presence takes with many users online.
func listLatency(r *run) ([]row, error) {
	p, err := r.startPresenced("list", "-slots", "601", "-tick", "1s")
	if err != nil {
		return nil, err
	}
	defer p.stop()
	base := p.http()
	total := r.onlineUsers
	start := time.Now()
	failed := heartbeats(base, 0, total, 32, func(i int) string { return "uid=u-" + strconv.Itoa(i) })
	progress("list: %d heartbeats in %v", total, time.Since(start).Round(time.Millisecond))
	count := onlineCount(base)
	time.Sleep(2 * time.Second)
	const gets = 50
	lat := make([]time.Duration, 0, gets)
	for range gets {
		t := time.Now()
		b, err := getBody(base + "/api/presence?limit=100")
		d := time.Since(t)
		if err != nil {
			return nil, err
		}
		var v struct {
			Count int
			Users []string
		}
		if json.Unmarshal(b, &v) != nil || v.Count != total || len(v.Users) != 100 {
			progress("list: unexpected answer: count %d, %d users", v.Count, len(v.Users))
		}
		lat = append(lat, d)
	}
	slices.Sort(lat)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
	p50, p99 := lat[gets/2-1], lat[(gets*99+99)/100-1]
	r.figures("list", "%d users online (%d failed heartbeats, count %d): GET /api/presence?limit=100 x%d: min %s, median %s, p99 %s",
		total, failed, count, gets, ms(lat[0]), ms(p50), ms(p99))
	return []row{{
		"9. GET /api/presence?limit=100 with 200,000 users online",
		fmt.Sprintf("median %s, p99 %s", ms(p50), ms(p99)),
		fmt.Sprintf("`-slots 601 -tick 1s`; %d heartbeat users; 50 sequential GETs on a keep-alive connection, timed at the client (p99: nearest rank, the slowest of 50)", total),
	}}, nil
}
