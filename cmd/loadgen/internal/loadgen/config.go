// Package loadgen drives many real WebSocket or Server-Sent Events clients
// against a presenced-style server (welcome, ping/pong, idle close 4408) and
// measures how
// quickly the server drops clients that go silent and whether it ever drops
// one that did not.
//
// A run is split over workers, usually separate processes, because one process
// may hold only as many sockets as its open-file limit allows. The Coordinator
// plans the split, starts workers through a Launcher, aggregates their reports
// and returns one Summary; RunWorker is what each worker executes.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/presenced/presenced/protocol"
)

// Config describes one load run as the user asked for it.
type Config struct {
	URL       string        // ws://host:port/path (sse: http://host:port/path) on a loopback address; uid is added per client
	Transport string        // TransportWS or TransportSSE; "" means TransportWS
	Conns     int           // clients to open in total
	Ramp      time.Duration // time over which the clients are opened, evenly spaced
	Every     time.Duration // 0: no application pings; else each client sends {"type":"ping"} this often
	Silent    int           // clients that stop answering and sending when the ramp ends
	Duration  time.Duration // whole run, ramp included; clients are closed when it ends

	Workers     int           // 0: one per PerWorker clients
	PerWorker   int           // clients per worker when Workers is 0; 0 means 10,000 (sse: 5,000)
	Sources     int           // source addresses to spread clients over; 0: one per 8,000 clients
	SourceFirst netip.Addr    // first source address; zero means 127.0.0.2
	UIDPrefix   string        // user IDs are UIDPrefix followed by a number; "" means "lg"
	Users       int           // distinct user IDs, client i being user i mod Users; 0: one per client
	Room        int           // >0: client i joins channel "room-<i/Room>" at connect, so rooms hold Room clients
	BigChannel  string        // "": none; else every BigEvery-th client (i mod BigEvery == 0) also joins it at connect
	BigEvery    int           // with BigChannel: 0 means 1 (every client)
	DialLimit   int           // concurrent dials per worker; 0 means 64
	ServerPID   int           // >0: sample this local process's CPU and RSS at the start and end of the hold
	Linger      time.Duration // wait after the deadline before closing clients, so the server is sampled undisturbed; 0 means 1 s
}

// The transports a client may use.
const (
	TransportWS  = "ws"  // a WebSocket
	TransportSSE = "sse" // GET path for the stream, POST path/{session} for each frame
)

const (
	defaultPerWorker    = 10000
	clientsPerSource    = 8000
	defaultDialLimit    = 64
	defaultUIDPrefix    = "lg"
	maxUIDPrefixLen     = 40
	roomPrefix          = "room-"
	startDelay          = 300 * time.Millisecond
	lingerAfterDeadline = time.Second
)

var defaultSourceFirst = netip.MustParseAddr("127.0.0.2")

// withDefaults fills the zero fields and checks the rest.
func (c Config) withDefaults(ctx context.Context) (Config, error) {
	if c.Conns <= 0 {
		return c, fmt.Errorf("conns must be positive, got %d", c.Conns)
	}
	if c.Silent < 0 || c.Silent > c.Conns {
		return c, fmt.Errorf("silent must be between 0 and conns (%d), got %d", c.Conns, c.Silent)
	}
	if c.Ramp < 0 || c.Every < 0 {
		return c, errors.New("ramp and every must not be negative")
	}
	if c.Duration <= c.Ramp {
		return c, fmt.Errorf("duration (%v) must be longer than the ramp (%v)", c.Duration, c.Ramp)
	}
	switch c.Transport {
	case "":
		c.Transport = TransportWS
	case TransportWS, TransportSSE:
	default:
		return c, fmt.Errorf("transport %q: want %q or %q", c.Transport, TransportWS, TransportSSE)
	}
	if c.PerWorker <= 0 {
		c.PerWorker = defaultPerWorker
		if c.Transport == TransportSSE {
			c.PerWorker /= 2 // two sockets a client, under the same open-file limit
		}
	}
	if c.Workers <= 0 {
		c.Workers = (c.Conns + c.PerWorker - 1) / c.PerWorker
	}
	if c.Workers > c.Conns {
		c.Workers = c.Conns
	}
	if c.Linger <= 0 {
		c.Linger = lingerAfterDeadline
	}
	if c.DialLimit <= 0 {
		c.DialLimit = defaultDialLimit
	}
	if c.UIDPrefix == "" {
		c.UIDPrefix = defaultUIDPrefix
	}
	if c.Users < 0 {
		return c, fmt.Errorf("users must not be negative, got %d", c.Users)
	}
	if c.Room < 0 {
		return c, fmt.Errorf("room must not be negative, got %d", c.Room)
	}
	if c.BigEvery < 0 {
		return c, fmt.Errorf("big-every must not be negative, got %d", c.BigEvery)
	}
	if c.BigChannel != "" {
		if !protocol.ValidChannel(c.BigChannel) || strings.HasPrefix(c.BigChannel, roomPrefix) {
			return c, fmt.Errorf("big channel %q: want 1-128 letters, digits or _.-:@/#, not starting with %q", c.BigChannel, roomPrefix)
		}
		if c.BigEvery == 0 {
			c.BigEvery = 1
		}
	} else if c.BigEvery != 0 {
		return c, errors.New("big-every needs big-channel")
	}
	if len(c.UIDPrefix) > maxUIDPrefixLen {
		return c, fmt.Errorf("uid prefix longer than %d characters", maxUIDPrefixLen)
	}
	target, err := loopbackTarget(ctx, c.URL, c.Transport)
	if err != nil {
		return c, err
	}
	if !c.SourceFirst.IsValid() {
		c.SourceFirst = defaultSourceFirst
	}
	if !target.Is4() {
		// 127.0.0.x sources cannot reach an IPv6 target; the kernel picks the source.
		c.Sources = 0
		return c, nil
	}
	if !c.SourceFirst.Is4() || !c.SourceFirst.IsLoopback() {
		return c, fmt.Errorf("source address %v is not an IPv4 loopback address", c.SourceFirst)
	}
	if c.Sources <= 0 {
		// A stream's client holds two connections: the stream and its POSTs'.
		socks := c.Conns
		if c.Transport == TransportSSE {
			socks *= 2
		}
		c.Sources = (socks + clientsPerSource - 1) / clientsPerSource
	}
	last := c.SourceFirst
	for range c.Sources - 1 {
		last = last.Next()
	}
	if !last.IsLoopback() || last.As4()[3] == 255 {
		return c, fmt.Errorf("%d source addresses from %v leave 127.0.0.0/8", c.Sources, c.SourceFirst)
	}
	return c, nil
}

// sourceAddrs lists the source addresses of c, empty when the kernel chooses.
func (c Config) sourceAddrs() []string {
	out := make([]string, 0, c.Sources)
	a := c.SourceFirst
	for range c.Sources {
		out = append(out, a.String())
		a = a.Next()
	}
	return out
}

// loopbackTarget checks that raw is a ws:// URL (http:// for sse) whose host
// resolves only to loopback addresses, so load never leaves the machine, and
// returns the first.
func loopbackTarget(ctx context.Context, raw, transport string) (netip.Addr, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("parse url %q: %w", raw, err)
	}
	scheme := "ws"
	if transport == TransportSSE {
		scheme = "http"
	}
	if u.Scheme != scheme {
		return netip.Addr{}, fmt.Errorf("url %q: scheme must be %s with transport %s (loopback only, no TLS)", raw, scheme, transport)
	}
	host := u.Hostname()
	if host == "" {
		return netip.Addr{}, fmt.Errorf("url %q has no host", raw)
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("resolve %q: %w", host, err)
	}
	if len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("resolve %q: no addresses", host)
	}
	for _, a := range addrs {
		if !a.Unmap().IsLoopback() {
			return netip.Addr{}, fmt.Errorf("url %q: %v is not a loopback address; load goes to 127.0.0.0/8 or ::1 only", raw, a)
		}
	}
	return addrs[0].Unmap(), nil
}

// Spec is one worker's share of a run. It travels to worker processes as JSON.
type Spec struct {
	Worker     int           `json:"worker"`
	URL        string        `json:"url"`
	Transport  string        `json:"transport,omitempty"`
	First      int           `json:"first"` // global index of this worker's first client
	Conns      int           `json:"conns"`
	Silent     int           `json:"silent"`
	Start      time.Time     `json:"start"` // common start of the ramp for all workers
	Ramp       time.Duration `json:"ramp"`
	Every      time.Duration `json:"every"`
	Duration   time.Duration `json:"duration"`
	Sources    []string      `json:"sources,omitempty"`
	UIDPrefix  string        `json:"uid_prefix"`
	Users      int           `json:"users"`
	Room       int           `json:"room,omitempty"`
	BigChannel string        `json:"big_channel,omitempty"`
	BigEvery   int           `json:"big_every,omitempty"`
	DialLimit  int           `json:"dial_limit"`
	TotalConns int           `json:"total_conns"` // to spread dial times over the whole ramp
	Linger     time.Duration `json:"linger"`
}

// plan splits c over its workers. Clients are interleaved across workers
// (client i belongs to worker i mod W) so every worker ramps over the whole
// ramp and silent clients are spread evenly.
func plan(c Config, start time.Time) []Spec {
	specs := make([]Spec, c.Workers)
	for w := range specs {
		n := c.Conns / c.Workers
		if w < c.Conns%c.Workers {
			n++
		}
		s := c.Silent / c.Workers
		if w < c.Silent%c.Workers {
			s++
		}
		specs[w] = Spec{
			Worker: w, URL: c.URL, Transport: c.Transport, First: w, Conns: n, Silent: s,
			Start: start, Ramp: c.Ramp, Every: c.Every, Duration: c.Duration,
			Sources: c.sourceAddrs(), UIDPrefix: c.UIDPrefix, Users: c.Users, DialLimit: c.DialLimit,
			Room: c.Room, BigChannel: c.BigChannel, BigEvery: c.BigEvery,
			TotalConns: c.Conns, Linger: c.Linger,
		}
	}
	return specs
}

// uid is the user ID of the client with run-wide index g.
func (s Spec) uid(g int) string {
	if s.Users > 0 {
		g %= s.Users
	}
	return s.UIDPrefix + strconv.Itoa(g)
}

// channels lists the channels the client with run-wide index g joins at
// connect, in the order they go into ?channels=.
func (s Spec) channels(g int) []string {
	var cs []string
	if s.Room > 0 {
		cs = append(cs, roomPrefix+strconv.Itoa(g/s.Room))
	}
	if s.BigChannel != "" && s.BigEvery > 0 && g%s.BigEvery == 0 {
		cs = append(cs, s.BigChannel)
	}
	return cs
}

// globalIndex is the run-wide index of the worker's i-th client.
func (s Spec) globalIndex(i int, workers int) int { return s.First + i*workers }

// procSample is what /proc tells about a process at one moment.
type procSample struct {
	CPU   time.Duration // user + system
	RSSKB int64
}

// sampleProc reads CPU time and resident memory of pid from /proc.
func sampleProc(pid int) (procSample, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procSample{}, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	// The command name may hold spaces and parentheses: fields start after the last ')'.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procSample{}, fmt.Errorf("parse stat of pid %d: no ')'", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return procSample{}, fmt.Errorf("parse stat of pid %d: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return procSample{}, fmt.Errorf("parse cpu times of pid %d: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procSample{}, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	var rss int64 = -1
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			rss, err = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return procSample{}, fmt.Errorf("parse VmRSS of pid %d: %w", pid, err)
			}
		}
	}
	if rss < 0 {
		return procSample{}, fmt.Errorf("no VmRSS for pid %d", pid)
	}
	// USER_HZ is 100 on every Linux this runs on (sysconf(_SC_CLK_TCK)).
	const tick = 10 * time.Millisecond
	return procSample{CPU: time.Duration(ut+st) * tick, RSSKB: rss}, nil
}
