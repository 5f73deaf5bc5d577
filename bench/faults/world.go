package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/presenced/presenced/bench/internal/child"
)

// Ring settings of the nodes: a 2 s timeout (10 ticks of 200 ms), so that a
// freeze or a stall of a few seconds outlives leases and command timeouts.
const (
	tick    = 200 * time.Millisecond
	slots   = 11
	timeout = (slots - 1) * tick
)

// world is what a run starts: Redis (one server, a Redis Cluster or a
// master and replica under Sentinel), the nodes, their links.
type world struct {
	mode        string
	bin         string // presenced
	redisServer string
	redisCLI    string
	dir         string // logs and config files
	hook        string // webhook URL
	secret      string
	apiKey      string // -api-key of the nodes: the API and the log of edges need it
	eventsMax   int    // -events-max of the nodes; 0: the server's default
	logf        func(format string, args ...any)

	mu     sync.Mutex
	redis  *child.Proc   // single mode
	links  []*link       // single mode: one per node
	nodes  []*child.Proc // index = node; nil while down
	addrs  []string      // each node's listen address, kept over restarts
	url    []string      // each node's -redis
	extra  []*child.Proc // cluster servers, or master, replica and sentinel
	master string        // sentinel mode: the master's name
}

// start starts Redis in w.mode and n nodes on it.
func (w *world) start(ctx context.Context, n int) error {
	switch w.mode {
	case "single":
		rd, err := child.StartRedis("redis", w.redisServer, "", w.logPath("redis"))
		if err != nil {
			return err
		}
		w.redis = rd
		for range n {
			l, err := newLink(rd.Addr)
			if err != nil {
				return err
			}
			w.links = append(w.links, l)
			w.url = append(w.url, "redis://"+l.addr()+"/0")
		}
	case "cluster":
		u, err := w.startCluster(ctx)
		if err != nil {
			return err
		}
		for range n {
			w.url = append(w.url, u)
		}
	case "sentinel":
		u, err := w.startSentinel()
		if err != nil {
			return err
		}
		for range n {
			w.url = append(w.url, u)
		}
	default:
		return fmt.Errorf("mode %q: want single, cluster or sentinel", w.mode)
	}
	w.nodes = make([]*child.Proc, n)
	for i := range n {
		addr, err := child.FreePort()
		if err != nil {
			return err
		}
		w.addrs = append(w.addrs, addr)
		if err := w.startNode(i); err != nil {
			return err
		}
	}
	return nil
}

func (w *world) logPath(name string) string { return filepath.Join(w.dir, name+".log") }

func nodeName(i int) string { return string(rune('A' + i)) }

// startNode starts node i on its address, appending to its log.
func (w *world) startNode(i int) error {
	args := []string{"-addr", w.addrs[i], "-tick", tick.String(), "-slots", fmt.Sprint(slots),
		"-redis", w.url[i], "-node", nodeName(i), "-webhook", w.hook, "-webhook-secret", w.secret, "-api-key", w.apiKey}
	if w.eventsMax > 0 {
		args = append(args, "-events-max", fmt.Sprint(w.eventsMax))
	}
	p, err := child.Start("node "+nodeName(i), w.bin, args, w.logPath("node-"+nodeName(i)))
	if err != nil {
		return err
	}
	p.Addr = w.addrs[i]
	if err := p.WaitHTTP("http://"+p.Addr+"/healthz", 30*time.Second); err != nil {
		p.Kill()
		return err
	}
	w.mu.Lock()
	w.nodes[i] = p
	w.mu.Unlock()
	return nil
}

func (w *world) node(i int) *child.Proc {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nodes[i]
}

// killNode ends node i with sig and waits for its exit.
func (w *world) killNode(i int, sig syscall.Signal) error {
	p := w.node(i)
	if p == nil {
		return fmt.Errorf("node %s is down", nodeName(i))
	}
	if err := p.Signal(sig); err != nil {
		return err
	}
	select {
	case <-p.Done():
	case <-time.After(15 * time.Second):
		p.Kill()
		return fmt.Errorf("node %s: no exit 15 s after %v, killed", nodeName(i), sig)
	}
	w.mu.Lock()
	w.nodes[i] = nil
	w.mu.Unlock()
	return nil
}

// restartRedis starts the single Redis again, empty, on its address.
func (w *world) restartRedis() error {
	rd, err := child.StartRedis("redis", w.redisServer, w.redis.Addr, w.logPath("redis"))
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.redis = rd
	w.mu.Unlock()
	return nil
}

// stop ends the nodes (SIGTERM), the links and Redis.
func (w *world) stop() {
	for i := range w.nodes {
		if p := w.node(i); p != nil {
			p.Stop(15 * time.Second)
		}
	}
	for _, l := range w.links {
		_ = l.close()
	}
	if w.redis != nil {
		w.redis.Stop(5 * time.Second)
	}
	for _, p := range w.extra {
		p.Stop(5 * time.Second)
	}
}

// apiGet reads path from node i's HTTP server with the API key; a status
// but 200 is an error.
func (w *world) apiGet(ctx context.Context, i int, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.addrs[i]+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "apikey "+w.apiKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("node %s %s: %w", nodeName(i), path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, fmt.Errorf("node %s %s: %w", nodeName(i), path, err)
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("node %s %s: %s: %s", nodeName(i), path, res.Status, b)
	}
	return b, nil
}

// cli runs redis-cli with args and returns its output.
func (w *world) cli(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, w.redisCLI, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("redis-cli %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// writeFile writes a config file in the run's directory.
func (w *world) writeFile(name, text string) (string, error) {
	p := filepath.Join(w.dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		return "", fmt.Errorf("config %s: %w", name, err)
	}
	return p, nil
}
