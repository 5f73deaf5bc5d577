// Command underfire measures a built presenced binary under bursts, floods,
// freezes, reconnect races, abuse and churn, with real processes and real
// gorilla clients over loopback, and prints the figures as a markdown table.
//
//	go build -o /tmp/presenced ./cmd/presenced
//	cd bench && go run ./underfire -bin /tmp/presenced [-before /tmp/presenced-old]
//
// Every scenario starts its own presenced process(es) (and redis-server for
// the cluster ones) on free loopback ports, prints one line of figures to
// stdout as it ends, and stops what it started. Progress goes to stderr.
// With -before, each scenario runs first on that binary, then on -bin, the
// same way. The table at the end has one row per case: the figure measured
// on -before, the figure measured on -bin, and how.
//
// A binary is started only with the flags its -h lists. A flag that tunes a
// feature under test (optional, below) is left out on a binary without it,
// which lacks the feature, and the cell says so; a scenario that needs any
// other flag the binary lacks does not run on it, and its cell says "n/a"
// and why, as for any scenario that cannot go on.
// Load stays on 127.0.0.1 and is bounded in count and time.
package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
)

var (
	bin      = flag.String("bin", "/tmp/presenced", "presenced binary to measure (the after column)")
	before   = flag.String("before", "", "an older presenced binary to measure the same way (the before column); empty: not measured")
	redisBin = flag.String("redis-server", "redis-server", "redis-server binary, for the cluster cases")
	only     = flag.String("only", "", "comma-separated scenarios to run (burst,flood,freeze,reconnect,cap,utf8,jwt,churn,list,cluster); empty: all")
	logDir   = flag.String("logs", "", "directory for the servers' output; empty: a new temporary directory")
	freeze   = flag.Duration("freeze", 40*time.Second, "how long the freeze case stops the server")
	churnN   = flag.Int("churn-users", 500_000, "users that come and go in the churn case")
	onlineN  = flag.Int("online-users", 200_000, "users online in the /api/presence latency case")
)

// row is what a scenario measured for one line of the final table, on the
// binary srv.
type row struct{ name, figure, how string }

type scenario struct {
	name string
	run  func() []row
}

func main() {
	flag.Parse()
	if *logDir == "" {
		d, err := os.MkdirTemp("", "underfire.")
		if err != nil {
			exitf("%v", err)
		}
		*logDir = d
	}
	afterBin := loadBinary("after", *bin)
	var beforeBin *binary
	if *before != "" {
		beforeBin = loadBinary("before", *before)
	}
	scenarios := []scenario{
		{"burst", burst},
		{"flood", flood},
		{"freeze", freezeCase},
		{"reconnect", reconnect},
		{"cap", connCap},
		{"utf8", invalidUTF8},
		{"jwt", jwtBasic},
		{"churn", churn},
		{"list", listLatency},
		{"cluster", cluster},
	}
	want := map[string]bool{}
	for s := range strings.SplitSeq(*only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			want[s] = true
		}
	}
	progress("logs in %s", *logDir)
	type line struct{ name, before, after, how string }
	var lines []line
	for _, s := range scenarios {
		if len(want) > 0 && !want[s.name] {
			continue
		}
		var bs []row
		var bErr string
		if beforeBin != nil {
			bs, bErr = runOn(beforeBin, s)
		}
		as, aErr := runOn(afterBin, s)
		for i := range max(len(bs), len(as), 1) {
			l := line{name: s.name}
			if i < len(bs) {
				l.name, l.before, l.how = bs[i].name, bs[i].figure, bs[i].how
			}
			if i < len(as) {
				l.name, l.after, l.how = as[i].name, as[i].figure, as[i].how
			}
			switch {
			case beforeBin == nil:
				l.before = "not measured (no `-before`)"
			case i >= len(bs):
				l.before = "n/a: " + cmp.Or(bErr, "no such case")
			}
			if i >= len(as) {
				l.after = "n/a: " + cmp.Or(aErr, "no such case")
			}
			lines = append(lines, l)
		}
	}
	fmt.Println()
	fmt.Println("| case | before | after | how measured |")
	fmt.Println("|---|---|---|---|")
	for _, l := range lines {
		fmt.Printf("| %s | %s | %s | %s |\n", l.name, l.before, l.after, l.how)
	}
}

// runOn runs scenario s on b. A scenario that cannot go on (fatalf) returns
// no rows and why; its deferred stops have run by then.
func runOn(b *binary, s scenario) (rows []row, failed string) {
	srv = b
	clear(b.dropped)
	start := time.Now()
	progress("%s on %s: start", s.name, b.label)
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(failure)
			if !ok {
				panic(r)
			}
			progress("%s on %s: could not run: %s", s.name, b.label, f)
			rows, failed = nil, string(f)
		}
	}()
	rows = s.run()
	progress("%s on %s: done in %v", s.name, b.label, time.Since(start).Round(100*time.Millisecond))
	if len(b.dropped) > 0 {
		var fs []string
		for _, f := range slices.Sorted(maps.Keys(b.dropped)) {
			fs = append(fs, "`-"+f+"`")
		}
		note := fmt.Sprintf(" (started without %s: not a flag of this binary)", strings.Join(fs, ", "))
		for i := range rows {
			rows[i].figure += note
		}
	}
	return rows, ""
}

// binary is a presenced binary under measurement.
type binary struct {
	label   string // before or after
	path    string
	flags   map[string]bool // the flags its -h lists
	dropped map[string]bool // flags the running scenario asked for that it lacks
}

// srv is the binary the running scenario measures.
var srv *binary

// loadBinary reads the flags of the presenced at path from its -h.
func loadBinary(label, path string) *binary {
	if _, err := os.Stat(path); err != nil {
		exitf("%s binary: %v (build it: go build -o %s ./cmd/presenced)", label, err, path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, path, "-h").CombinedOutput() // -h exits 0 or 2
	b := &binary{label: label, path: path, flags: map[string]bool{}, dropped: map[string]bool{}}
	for l := range strings.SplitSeq(string(out), "\n") {
		// The flag package lists each flag as "  -name" or "  -name type".
		if rest, ok := strings.CutPrefix(l, "  -"); ok {
			if name, _, _ := strings.Cut(rest, " "); name != "" {
				b.flags[name] = true
			}
		}
	}
	if !b.flags["addr"] {
		exitf("%s binary %s: no -addr in its -h output, so no way to keep it on loopback:\n%s", label, path, out)
	}
	progress("%s: %s (%d flags)", label, path, len(b.flags))
	return b
}

// optional are the flags that tune the features under fire: a binary
// without one lacks the feature, and runs without the flag.
var optional = map[string]bool{
	"queue-bytes": true, "frame-rate": true, "frame-burst": true, "byte-rate": true, "max-conns-per-user": true,
}

// known returns args, pairs of -name value, without the optional flags srv
// does not know; it records those in srv.dropped. Any other flag srv does
// not know ends the scenario.
func known(args []string) []string {
	if len(args)%2 != 0 {
		panic(fmt.Sprintf("presenced args not in -name value pairs: %q", args))
	}
	var out []string
	for i := 0; i < len(args); i += 2 {
		name := strings.TrimLeft(args[i], "-")
		switch {
		case srv.flags[name]:
			out = append(out, args[i], args[i+1])
		case optional[name]:
			srv.dropped[name] = true
		default:
			fatalf("no such flag: this binary has no `-%s`", name)
		}
	}
	return out
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "underfire %s: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func exitf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "underfire: "+format+"\n", args...)
	os.Exit(1)
}

// failure is why a scenario could not go on.
type failure string

// fatalf ends the running scenario: runOn recovers and reports it.
func fatalf(format string, args ...any) {
	panic(failure(fmt.Sprintf(format, args...)))
}

// figures prints a scenario's one line of figures, measured on srv.
func figures(name, format string, args ...any) {
	fmt.Printf("%s [%s]: %s\n", name, srv.label, fmt.Sprintf(format, args...))
}

// --- processes ---

var logSeq atomic.Int32

// proc is a child process: presenced or redis-server.
type proc struct {
	name string
	addr string // 127.0.0.1:port
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startProc(name string, path string, args []string) *proc {
	logPath := filepath.Join(*logDir, fmt.Sprintf("%02d-%s-%s.log", logSeq.Add(1), srv.label, name))
	f, err := os.Create(logPath)
	if err != nil {
		fatalf("%v", err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// No PRESENCED_* from our environment: the flags say everything.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PRESENCED_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if err := cmd.Start(); err != nil {
		fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	return p
}

// startPresenced runs srv on a free loopback port with args (-name value
// pairs, those srv knows) and waits until /healthz answers.
func startPresenced(name string, args ...string) *proc {
	addr := freePort()
	p := startProc(name, srv.path, known(append([]string{"-addr", addr}, args...)))
	p.addr = addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-p.done:
			fatalf("%s exited at start; see %s", name, p.log)
		default:
		}
		if res, err := http.Get("http://" + addr + "/healthz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			fatalf("%s never became healthy; see %s", name, p.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startRedis runs a redis-server without persistence on a free loopback port.
func startRedis() *proc {
	addr := freePort()
	_, port, _ := net.SplitHostPort(addr)
	p := startProc("redis", *redisBin, []string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no"})
	p.addr = addr
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			fmt.Fprint(c, "PING\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				return p
			}
		}
		if time.Now().After(deadline) {
			fatalf("redis-server did not come up; see %s", p.log)
		}
	}
}

func (p *proc) signal(sig syscall.Signal) {
	if err := p.cmd.Process.Signal(sig); err != nil {
		progress("%s: signal %v: %v", p.name, sig, err)
	}
}

// stop ends p with SIGTERM, or SIGKILL after 12 s; nothing if it has exited.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(12 * time.Second):
		progress("%s: no exit 12 s after SIGTERM, killing it", p.name)
		p.signal(syscall.SIGKILL)
		<-p.done
	}
}

func (p *proc) http() string { return "http://" + p.addr }

// --- HTTP ---

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

// --- WebSocket clients ---

var dialer = &websocket.Dialer{HandshakeTimeout: 10 * time.Second}

// frame is what the harness reads of a server frame.
type frame struct {
	Type    string   `json:"type"`
	Channel string   `json:"channel"`
	From    string   `json:"from"`
	Online  []string `json:"online"`
	Offline []string `json:"offline"`
	Joins   []string `json:"joins"`
	Leaves  []string `json:"leaves"`
	Count   int      `json:"count"`
}

// client is a gorilla connection whose reader runs at network speed and
// answers the server's pings (gorilla's default ping handler).
type client struct {
	uid string
	ws  *websocket.Conn

	mu     sync.Mutex
	onText func(f *frame, raw []byte) // called on the reader goroutine

	local   atomic.Bool // the harness closed it
	ended   chan struct{}
	endErr  error
	endedAt time.Time
}

func dial(addr, query string, hdr http.Header) (*websocket.Conn, *http.Response, error) {
	return dialer.Dial("ws://"+addr+"/ws?"+query, hdr)
}

// connect dials and starts the reader; onText may be nil.
func connect(addr, uid, query string, onText func(*frame, []byte)) (*client, error) {
	q := "uid=" + uid
	if query != "" {
		q += "&" + query
	}
	ws, _, err := dial(addr, q, nil)
	if err != nil {
		return nil, err
	}
	c := &client{uid: uid, ws: ws, onText: onText, ended: make(chan struct{})}
	go c.read()
	return c, nil
}

func (c *client) read() {
	for {
		mt, data, err := c.ws.ReadMessage()
		if err != nil {
			c.endErr, c.endedAt = err, time.Now()
			close(c.ended)
			return
		}
		if mt != websocket.TextMessage || c.onText == nil {
			continue
		}
		var f frame
		if json.Unmarshal(data, &f) == nil {
			c.onText(&f, data)
		}
	}
}

// isEnded reports whether the reader stopped for a reason other than the
// harness's own close.
func (c *client) isEnded() bool {
	select {
	case <-c.ended:
		return !c.local.Load()
	default:
		return false
	}
}

// send writes a text frame; gorilla allows one writer at a time.
func (c *client) send(s string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.ws.WriteMessage(websocket.TextMessage, []byte(s))
}

// close ends the connection from the harness's side: a close frame, then the
// socket.
func (c *client) close() {
	c.local.Store(true)
	c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	c.ws.Close()
}

// endKind names how a connection ended: a close code, or the transport error.
func endKind(err error) string {
	if ce, ok := errors.AsType[*websocket.CloseError](err); ok {
		return strconv.Itoa(ce.Code)
	}
	switch {
	case err == nil:
		return "open"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "EOF"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	}
	return err.Error()
}

func endDetail(err error) string {
	if ce, ok := errors.AsType[*websocket.CloseError](err); ok && ce.Text != "" {
		return fmt.Sprintf("%d %q", ce.Code, ce.Text)
	}
	return endKind(err)
}

// tally counts the clients the server ended, by how.
func tally(cs []*client) (int, string) {
	by := map[string]int{}
	n := 0
	for _, c := range cs {
		if c.isEnded() {
			n++
			by[endDetail(c.endErr)]++
		}
	}
	if n == 0 {
		return 0, "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(by)) {
		parts = append(parts, fmt.Sprintf("%d× %s", by[k], k))
	}
	return n, strings.Join(parts, ", ")
}

func closeAll(cs []*client) {
	for _, c := range cs {
		if c != nil {
			c.close()
		}
	}
}

// waitFor polls cond every 20 ms until it holds or d passes; it reports
// whether it held.
func waitFor(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	return out
}

func watchFrame(uids []string) string {
	b, _ := json.Marshal(map[string]any{"type": "watch", "uids": uids})
	return string(b)
}

// watcher follows how many of its watched users a client knows online.
type watcher struct {
	watching atomic.Bool
	online   atomic.Int64
	offline  atomic.Int64 // offline IDs received in status frames
	statuses atomic.Int64
}

func (w *watcher) onText(f *frame, _ []byte) {
	switch f.Type {
	case "watching":
		w.online.Store(int64(len(f.Online)))
		w.watching.Store(true)
	case "status":
		w.statuses.Add(1)
		w.online.Add(int64(len(f.Online) - len(f.Offline)))
		w.offline.Add(int64(len(f.Offline)))
	}
}

// watchers connects n clients uid prefix+i to addr with query, each sending
// watch of uids, and waits for every watching answer.
func watchers(addr, prefix string, n int, query string, uids []string) ([]*client, []*watcher) {
	cs := make([]*client, n)
	ws := make([]*watcher, n)
	wf := watchFrame(uids)
	for i := range n {
		w := &watcher{}
		c, err := connect(addr, fmt.Sprintf("%s%04d", prefix, i), query, w.onText)
		if err != nil {
			fatalf("dial %s%04d: %v", prefix, i, err)
		}
		if err := c.send(wf); err != nil {
			fatalf("watch: %v", err)
		}
		cs[i], ws[i] = c, w
	}
	if !waitFor(20*time.Second, func() bool {
		for _, w := range ws {
			if !w.watching.Load() {
				return false
			}
		}
		return true
	}) {
		fatalf("not every watcher got its watching frame")
	}
	return cs, ws
}

// --- 1. burst ---

func burst() []row {
	const readers, users = 20, 400
	p := startPresenced("burst", "-slots", "11", "-tick", "200ms", "-max-message", "16384")
	defer p.stop()
	hb := ids("hb-", users)
	cs, ws := watchers(p.addr, "reader-", readers, "channels=lobby", hb)
	defer closeAll(cs)

	start := time.Now()
	failed := heartbeats(p.http(), 0, users, 16, func(i int) string { return "channels=lobby&uid=" + hb[i] })
	span := time.Since(start)
	allOnline := waitFor(5*time.Second, func() bool {
		for _, w := range ws {
			if w.online.Load() != users {
				return false
			}
		}
		return true
	})
	// The timeout is 2 s: every lease ends in one step about then.
	allOffline := waitFor(8*time.Second, func() bool {
		for i, w := range ws {
			if w.offline.Load() < users && !cs[i].isEnded() {
				return false
			}
		}
		return true
	})
	offlineAt := time.Since(start)
	time.Sleep(time.Second)
	closed, how := tally(cs)
	maxStatus := int64(0)
	for _, w := range ws {
		maxStatus = max(maxStatus, w.statuses.Load())
	}
	m := metrics(p.http())
	figures("burst", "%d readers, %d heartbeat users posted in %v (%d failed); all seen online %v, all offline %v at %v; "+
		"readers closed: %d (%s); most status frames per reader %d; server closes: %s",
		readers, users, span.Round(time.Millisecond), failed, allOnline, allOffline, offlineAt.Round(time.Millisecond),
		closed, how, maxStatus, closesByReason(m))
	after := fmt.Sprintf("%d of %d closed", closed, readers)
	if closed > 0 {
		after += " (" + how + ")"
	}
	return []row{{
		"1. burst: 400 heartbeat users expire in one step, 20 readers watching them",
		after,
		fmt.Sprintf("`-slots 11 -tick 200ms -max-message 16384`; 20 clients in `lobby` watching the 400 IDs; 400 POST /api/heartbeat?channels=lobby in %v; closes counted 1 s after every reader saw 400 offline", span.Round(time.Millisecond)),
	}}
}

// --- 2. flood ---

func flood() []row {
	const readers = 12
	p := startPresenced("flood")
	defer p.stop()
	var fromFlooder [readers]atomic.Int64
	var hellos [readers]atomic.Int64
	cs := make([]*client, readers)
	for i := range readers {
		c, err := connect(p.addr, fmt.Sprintf("reader-%02d", i), "channels=lobby", func(f *frame, raw []byte) {
			if f.Type != "chat" {
				return
			}
			if f.From == "flooder" {
				fromFlooder[i].Add(1)
			} else if strings.Contains(string(raw), "hello") {
				hellos[i].Add(1)
			}
		})
		if err != nil {
			fatalf("dial: %v", err)
		}
		cs[i] = c
	}
	defer closeAll(cs)
	fl, _, err := dial(p.addr, "uid=flooder&channels=lobby", nil)
	if err != nil {
		fatalf("dial flooder: %v", err)
	}
	defer fl.Close()
	time.Sleep(200 * time.Millisecond)

	msg := []byte(`{"type":"chat","channel":"lobby","text":"` + strings.Repeat("spam ", 10) + `"}`)
	start := time.Now()
	end := start.Add(3 * time.Second)
	fl.SetWriteDeadline(end)
	written := 0
	var werr error
	for time.Now().Before(end) {
		if werr = fl.WriteMessage(websocket.TextMessage, msg); werr != nil {
			break
		}
		written++
	}
	wrote := time.Since(start)
	closedIn3s, how3s := tally(cs)
	// How the flooder ended: what it reads now, after its unread frames.
	fl.SetReadDeadline(time.Now().Add(5 * time.Second))
	var rerr error
	for rerr == nil {
		_, _, rerr = fl.ReadMessage()
	}
	writeEnd := "none within 3 s"
	if werr != nil && !errors.Is(werr, os.ErrDeadlineExceeded) {
		writeEnd = fmt.Sprintf("%s after %v", endKind(werr), wrote.Round(time.Millisecond))
	}
	// The others chat on.
	time.Sleep(500 * time.Millisecond)
	for i, c := range cs {
		if !c.isEnded() {
			c.send(fmt.Sprintf(`{"type":"chat","channel":"lobby","text":"hello from %d"}`, i))
		}
	}
	waitFor(3*time.Second, func() bool {
		for i := range cs {
			if hellos[i].Load() < readers {
				return false
			}
		}
		return true
	})
	closed, how := tally(cs)
	lo, hi := int64(1<<62), int64(0)
	helloMin := int64(1 << 62)
	for i := range readers {
		lo, hi = min(lo, fromFlooder[i].Load()), max(hi, fromFlooder[i].Load())
		helloMin = min(helloMin, hellos[i].Load())
	}
	m := metrics(p.http())
	figures("flood", "flooder wrote %d frames (%d B each) in %v, its write side ended: %s; it then read: %s; "+
		"chats of the flooder delivered per reader %d..%d; readers closed within 3 s: %d (%s), at the end %d (%s); "+
		"each reader then got %d of %d hellos; server closes: %s",
		written, len(msg), wrote.Round(time.Millisecond), writeEnd, endDetail(rerr), lo, hi,
		closedIn3s, how3s, closed, how, helloMin, readers, closesByReason(m))
	return []row{{
		"2. flood: one client writes chat without reading for 3 s, 12 others read",
		fmt.Sprintf("%d of 12 closed; %d of the flooder's %d chats delivered (to each reader); the flooder: close %s (write side: %s)",
			closedIn3s, hi, written, endDetail(rerr), writeEnd),
		"default flags (50 frames/s, bursts of 100); 13 clients in `lobby`; chats from the flooder counted at each reader; then every reader chats once and gets all 12",
	}}
}

// --- 3. freeze ---

func freezeCase() []row {
	const pinging = 50
	p := startPresenced("freeze") // 31 slots x 1 s: a 30 s timeout
	defer p.stop()
	cs := make([]*client, pinging)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range pinging {
		c, err := connect(p.addr, fmt.Sprintf("live-%02d", i), "", nil)
		if err != nil {
			fatalf("dial: %v", err)
		}
		cs[i] = c
		wg.Go(func() {
			tk := time.NewTicker(5 * time.Second)
			defer tk.Stop()
			for {
				select {
				case <-stop:
					return
				case <-c.ended:
					return
				case <-tk.C:
					if c.send(`{"type":"ping"}`) != nil {
						return
					}
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait(); closeAll(cs) }()
	silentWS, _, err := dial(p.addr, "uid=silent", nil)
	if err != nil {
		fatalf("dial silent: %v", err)
	}
	silent := &client{uid: "silent", ws: silentWS, ended: make(chan struct{})}
	silentWS.SetPingHandler(func(string) error { return nil }) // never answers
	go silent.read()
	defer silent.close()

	time.Sleep(2 * time.Second)
	progress("freeze: SIGSTOP for %v", *freeze)
	p.signal(syscall.SIGSTOP)
	time.Sleep(*freeze)
	p.signal(syscall.SIGCONT)
	resumed := time.Now()
	progress("freeze: SIGCONT")
	time.Sleep(10 * time.Second)
	select {
	case <-silent.ended:
	case <-time.After(30 * time.Second):
	}
	closed, how := tally(cs)
	silentEnd := "not closed 40 s after the resume"
	if silent.isEnded() {
		silentEnd = fmt.Sprintf("%s, %v after the resume", endDetail(silent.endErr), silent.endedAt.Sub(resumed).Round(time.Millisecond))
	}
	m := metrics(p.http())
	figures("freeze", "%d pinging clients, stopped %v: closed %d (%s); silent client: %s; server closes: %s; connections now %g",
		pinging, *freeze, closed, how, silentEnd, closesByReason(m), m["presenced_connections"])
	return []row{{
		"3. freeze: server SIGSTOPped 40 s (timeout 30 s), 50 clients pinging every 5 s",
		fmt.Sprintf("%d of 50 closed; the silent client: %s", closed, silentEnd),
		"default `-slots 31 -tick 1s`; clients send `{\"type\":\"ping\"}` every 5 s and answer pings; SIGSTOP, 40 s, SIGCONT, 10 s; plus one client that never sends nor answers pings",
	}}
}

// --- 4. reconnect races ---

// reconnects closes and at once reopens a connection of alice watching
// alice, rounds times, on nodes[i%len(nodes)], each living dwell; it returns
// the status frames that told a live connection of alice that alice is
// offline, samples of them, and what else alice's connections heard: every
// status frame, and watching answers without alice online.
func reconnects(nodes []*proc, rounds int, dwell time.Duration) (told int, samples []string, statuses, notOnline int) {
	var toldN, statusN, notOnlineN atomic.Int64
	var mu sync.Mutex
	var cur *client
	var curGone *atomic.Bool
	for i := range rounds {
		if cur != nil {
			curGone.Store(true)
			cur.close()
		}
		n := nodes[i%len(nodes)]
		watching := make(chan struct{}, 1)
		gone := new(atomic.Bool) // set before the harness closes it
		c, err := connect(n.addr, "alice", "", func(f *frame, raw []byte) {
			switch f.Type {
			case "watching":
				if !slices.Contains(f.Online, "alice") && notOnlineN.Add(1) <= 3 {
					progress("reconnect: round %d on %s: %s", i, n.name, raw)
				}
				select {
				case watching <- struct{}{}:
				default:
				}
			case "status":
				if statusN.Add(1) <= 3 {
					progress("reconnect: round %d on %s heard %s", i, n.name, raw)
				}
				if slices.Contains(f.Offline, "alice") && !gone.Load() {
					toldN.Add(1)
					mu.Lock()
					samples = append(samples, fmt.Sprintf("round %d on %s: %s", i, n.name, raw))
					mu.Unlock()
				}
			}
		})
		if err != nil {
			fatalf("dial alice: %v", err)
		}
		if err := c.send(`{"type":"watch","uids":["alice"]}`); err != nil {
			fatalf("watch: %v", err)
		}
		select {
		case <-watching:
		case <-time.After(5 * time.Second):
			progress("reconnect: round %d: no watching frame", i)
		}
		cur, curGone = c, gone
		time.Sleep(dwell)
	}
	time.Sleep(2 * time.Second) // late frames reach the last connection
	curGone.Store(true)
	cur.close()
	return int(toldN.Load()), samples, int(statusN.Load()), int(notOnlineN.Load())
}

func reconnect() []row {
	const rounds = 30
	dwell := 300 * time.Millisecond
	args := []string{"-slots", "11", "-tick", "200ms"}
	p := startPresenced("reconnect", args...)
	one, samples1, st1, no1 := reconnects([]*proc{p}, rounds, dwell)
	p.stop()
	figures("reconnect-one", "%d of %d reconnects told alice offline on a live connection %v; status frames heard by alice: %d; watching answers without alice online: %d",
		one, rounds, samples1, st1, no1)

	r := startRedis()
	defer r.stop()
	url := "redis://" + r.addr + "/0"
	n1 := startPresenced("n1", append(args, "-redis", url, "-node", "n1")...)
	defer n1.stop()
	n2 := startPresenced("n2", append(args, "-redis", url, "-node", "n2")...)
	defer n2.stop()
	two, samples2, st2, no2 := reconnects([]*proc{n1, n2}, rounds, dwell)
	figures("reconnect-two", "%d of %d reconnects told alice offline on a live connection %v; status frames heard by alice: %d; watching answers without alice online: %d",
		two, rounds, samples2, st2, no2)
	how := "`-slots 11 -tick 200ms`; alice (watching alice) closes (close frame) and dials again at once, 30 times, each connection living 300 ms after its `watching`; status frames with alice offline counted on connections the harness had not closed"
	return []row{
		{"4a. reconnect races, one node", fmt.Sprintf("%d in %d", one, rounds), how},
		{"4b. reconnect races, two nodes on one Redis, alternating", fmt.Sprintf("%d in %d", two, rounds), how + "; redis-server 7 on loopback, `-node n1`/`n2`"},
	}
}

// --- 5. connections per user ---

func connCap() []row {
	const tries = 2000
	p := startPresenced("cap")
	defer p.stop()
	var ok []*websocket.Conn
	statuses := map[string]int{}
	for range tries {
		ws, res, err := dial(p.addr, "uid=crowd", nil)
		switch {
		case err == nil:
			ok = append(ok, ws)
		case res != nil:
			statuses[strconv.Itoa(res.StatusCode)]++
			res.Body.Close()
		default:
			statuses[err.Error()]++
		}
	}
	for _, ws := range ok {
		ws.Close()
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(statuses)) {
		parts = append(parts, fmt.Sprintf("%d× %s", statuses[k], k))
	}
	refused := cmp.Or(strings.Join(parts, ", "), "none refused")
	figures("cap", "%d dials of one user: %d upgraded, refused: %s", tries, len(ok), refused)
	return []row{{
		"5. one user opens 2,000 sockets",
		fmt.Sprintf("%d upgraded, %s", len(ok), refused),
		"2,000 sequential dials of `?uid=crowd`, all kept open until the end",
	}}
}

// --- 6. invalid UTF-8 ---

func invalidUTF8() []row {
	p := startPresenced("utf8")
	defer p.stop()
	ws, _, err := dial(p.addr, "uid=alice&channels=lobby", nil)
	if err != nil {
		fatalf("dial: %v", err)
	}
	defer ws.Close()
	ws.WriteMessage(websocket.TextMessage, []byte("{\"type\":\"chat\",\"channel\":\"lobby\",\"text\":\"\xff\xfe\"}"))
	ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got []string // the types of the frames read since the dial
	for err == nil {
		var data []byte
		if _, data, err = ws.ReadMessage(); err == nil {
			var f frame
			json.Unmarshal(data, &f)
			got = append(got, cmp.Or(f.Type, "?"))
		}
	}
	end := endDetail(err)
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		end = "not closed within 5 s"
	}
	end += fmt.Sprintf(" (frames read: %s)", cmp.Or(strings.Join(got, ", "), "none"))
	figures("utf8", "a text frame with bytes ff fe: %s", end)
	return []row{{"6. text frame with invalid UTF-8", end, "a chat frame whose text holds bytes `ff fe` sent right after the dial; frames read until the close, or for 5 s"}}
}

// --- 7. JWT with a Basic Authorization header ---

func hs256(secret, sub string, exp time.Time) string {
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	body, _ := json.Marshal(map[string]any{"sub": sub, "exp": exp.Unix()})
	signing := head + "." + enc.EncodeToString(body)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(signing))
	return signing + "." + enc.EncodeToString(mac.Sum(nil))
}

func jwtBasic() []row {
	p := startPresenced("jwt", "-jwt-secret", "s")
	defer p.stop()
	tok := hs256("s", "alice", time.Now().Add(time.Hour))
	try := func(query string, hdr http.Header) string {
		ws, res, err := dial(p.addr, query, hdr)
		if err != nil {
			if res != nil {
				return "refused " + strconv.Itoa(res.StatusCode)
			}
			return err.Error()
		}
		defer ws.Close()
		ws.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, data, err := ws.ReadMessage()
		if err != nil {
			return "upgraded, then " + endDetail(err)
		}
		var f struct{ Type, UID string }
		json.Unmarshal(data, &f)
		return fmt.Sprintf("accepted (%s as %s)", f.Type, f.UID)
	}
	basic := http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("proxy:secret"))}}
	both := try("token="+tok, basic)
	bearer := try("", http.Header{"Authorization": {"Bearer " + tok}})
	none := try("", basic)
	figures("jwt", "Basic header + ?token=: %s; Bearer header alone: %s; Basic header alone: %s", both, bearer, none)
	return []row{{"7. JWT mode: `Authorization: Basic ...` plus `?token=`", both,
		"`-jwt-secret s`; HS256 token with `sub` and `exp`; controls: Bearer alone " + bearer + ", Basic alone " + none}}
}

// --- 8. memory after churn ---

func heapFigures(m map[string]float64) string {
	return fmt.Sprintf("heap inuse %.1f MB, alloc %.1f MB (GCs %g)",
		m["go_memstats_heap_inuse_bytes"]/1e6, m["go_memstats_heap_alloc_bytes"]/1e6, m["go_gc_duration_seconds_count"])
}

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

func churn() []row {
	p := startPresenced("churn", "-slots", "11", "-tick", "200ms")
	defer p.stop()
	base := p.http()
	idle := metrics(base)
	total := *churnN
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
	figures("churn", "%d users by heartbeat in %v (%d failed, at most %d online at once); online 0: %v at %v; "+
		"idle: %s; at the end of the posts: %s; 3 s after empty: %s; after %d scrapes: %s; RSS %.0f MB",
		total, posted.Round(time.Millisecond), failed, peak, zero, emptyAt.Round(time.Millisecond),
		heapFigures(idle), heapFigures(peakHeap), heapFigures(settled), scrapes, heapFigures(after), rssMB(p.cmd.Process.Pid))
	return []row{{
		"8. live heap after 500,000 users came and went",
		fmt.Sprintf("heap inuse %.1f MB, alloc %.1f MB (idle server: %.1f / %.1f MB; %.0f MB inuse at the end of the churn)",
			after["go_memstats_heap_inuse_bytes"]/1e6, after["go_memstats_heap_alloc_bytes"]/1e6,
			idle["go_memstats_heap_inuse_bytes"]/1e6, idle["go_memstats_heap_alloc_bytes"]/1e6,
			peakHeap["go_memstats_heap_inuse_bytes"]/1e6),
		fmt.Sprintf("`-slots 11 -tick 200ms`; %d POST /api/heartbeat?uid=u-N on 32 keep-alive connections in %v (at most %d online at once); once /api/presence counts 0, /metrics scraped until two more GCs ran", total, posted.Round(time.Second), peak),
	}}
}

// --- 9. /api/presence latency ---

func listLatency() []row {
	p := startPresenced("list", "-slots", "601", "-tick", "1s")
	defer p.stop()
	base := p.http()
	total := *onlineN
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
			fatalf("%v", err)
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
	figures("list", "%d users online (%d failed heartbeats, count %d): GET /api/presence?limit=100 x%d: min %s, median %s, p99 %s",
		total, failed, count, gets, ms(lat[0]), ms(p50), ms(p99))
	return []row{{
		"9. GET /api/presence?limit=100 with 200,000 users online",
		fmt.Sprintf("median %s, p99 %s", ms(p50), ms(p99)),
		fmt.Sprintf("`-slots 601 -tick 1s`; %d heartbeat users; 50 sequential GETs on a keep-alive connection, timed at the client (p99: nearest rank, the slowest of 50)", total),
	}}
}

// --- 10. cluster ---

// keepBeating posts a heartbeat for each of uids every period until stop.
func keepBeating(base string, uids []string, period time.Duration, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			heartbeats(base, 0, len(uids), 16, func(i int) string { return "uid=" + uids[i] })
			select {
			case <-stop:
				return
			case <-time.After(period):
			}
		}
	})
	return &wg
}

// lostNode runs one case: node n1 holds held heartbeat users, clients on n2
// watch the first watched of them, then n1 gets sig.
func lostNode(sigName string, sig syscall.Signal, held, clients, watched int) (closed int, how string, offlineIn time.Duration, allOffline bool) {
	args := []string{"-slots", "11", "-tick", "400ms", "-max-message", "32768"}
	r := startRedis()
	defer r.stop()
	url := "redis://" + r.addr + "/0"
	n1 := startPresenced("n1-"+sigName, append(args, "-redis", url, "-node", "n1")...)
	defer n1.stop()
	n2 := startPresenced("n2-"+sigName, append(args, "-redis", url, "-node", "n2")...)
	defer n2.stop()
	hb := ids("hb-", held)
	stop := make(chan struct{})
	beating := keepBeating(n1.http(), hb, time.Second, stop)
	cs, ws := watchers(n2.addr, "w-", clients, "", hb[:watched])
	defer closeAll(cs)
	if !waitFor(20*time.Second, func() bool {
		for _, w := range ws {
			if w.online.Load() != int64(watched) {
				return false
			}
		}
		return true
	}) {
		progress("cluster: not every watcher saw %d online", watched)
	}
	time.Sleep(time.Second)
	n1.signal(sig)
	killed := time.Now()
	close(stop)
	beating.Wait()
	allOffline = waitFor(30*time.Second, func() bool {
		for i, w := range ws {
			if w.online.Load() != 0 && !cs[i].isEnded() {
				return false
			}
		}
		return true
	})
	offlineIn = time.Since(killed)
	time.Sleep(2 * time.Second)
	closed, how = tally(cs)
	m := metrics(n2.http())
	figures("cluster-"+sigName, "n1 holds %d heartbeat users, %d clients on n2 watch %d of them; after %s: survivors closed %d (%s); "+
		"every watcher saw them all offline: %v, %v after the signal; n2 closes: %s",
		held, clients, watched, sigName, closed, how, allOffline, offlineIn.Round(time.Millisecond), closesByReason(m))
	return
}

func cluster() []row {
	k, kHow, kIn, kAll := lostNode("SIGKILL", syscall.SIGKILL, 2000, 1000, 1000)
	t, tHow, tIn, tAll := lostNode("SIGTERM", syscall.SIGTERM, 400, 20, 400)
	outcome := func(n, of int, how string, in time.Duration, all bool) string {
		s := fmt.Sprintf("%d of %d closed", n, of)
		if n > 0 {
			s += " (" + how + ")"
		}
		if all {
			s += fmt.Sprintf("; all offline on every watcher %.1f s after the signal", in.Seconds())
		} else {
			s += "; not every watcher saw every offline"
		}
		return s
	}
	how := "two nodes (`-slots 11 -tick 400ms`, a 4 s timeout) on one redis-server; heartbeats posted to n1 every second until the signal; the watchers on n2 read at network speed and answer pings"
	return []row{
		{"10a. cluster: node with 2,000 heartbeat users SIGKILLed, 1,000 clients on the other node watch 1,000 of them", outcome(k, 1000, kHow, kIn, kAll), how},
		{"10b. cluster: node with 400 heartbeat users SIGTERMed, 20 clients on the other node watch them", outcome(t, 20, tHow, tIn, tAll), how},
	}
}
