package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// httpClient keeps a pool of connections per server, so that the posts of
// many users reuse keep-alive connections instead of using up ports.
var httpClient = &http.Client{
	Timeout: 30 * time.Second,
	Transport: &http.Transport{
		MaxIdleConnsPerHost: 64,
		MaxConnsPerHost:     64,
		IdleConnTimeout:     30 * time.Second,
	},
}

// heartbeat posts one heartbeat and returns its status.
func heartbeat(base, query string) (int, error) {
	res, err := httpClient.Post(base+"/api/heartbeat?"+query, "", nil)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, nil
}

// heartbeats posts one heartbeat for each i in [from, to) with query(i), on
// workers goroutines, and returns how many did not answer 204.
func heartbeats(base string, from, to, workers int, query func(i int) string) int {
	var next atomic.Int64
	next.Store(int64(from))
	var failed atomic.Int64
	var firstErr sync.Once
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				code, err := heartbeat(base, query(i))
				if err != nil || code != http.StatusNoContent {
					failed.Add(1)
					firstErr.Do(func() { progress("heartbeat %s: status %d, %v", query(i), code, err) })
				}
			}
		})
	}
	wg.Wait()
	return int(failed.Load())
}

func getBody(url string) ([]byte, error) {
	res, err := httpClient.Get(url)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err == nil && res.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, res.Status)
	}
	return b, err
}

// onlineCount is the count of GET /api/presence?limit=0, or -1.
func onlineCount(base string) int {
	b, err := getBody(base + "/api/presence?limit=0")
	if err != nil {
		progress("presence count: %v", err)
		return -1
	}
	var v struct{ Count int }
	if json.Unmarshal(b, &v) != nil {
		return -1
	}
	return v.Count
}

// metrics reads the unlabelled samples, and the labelled ones under their
// full name with labels, of GET /metrics.
func metrics(base string) map[string]float64 {
	b, err := getBody(base + "/metrics")
	if err != nil {
		progress("metrics: %v", err)
		return nil
	}
	m := map[string]float64{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

// closesByReason sums presenced_closes_total per reason, non-zero only.
func closesByReason(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if r, ok := strings.CutPrefix(k, `presenced_closes_total{reason="`); ok && m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %g", strings.TrimSuffix(r, `"}`), m[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
