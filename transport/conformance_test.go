package transport_test

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

var conformanceFull = flag.Bool("conformance.full", false,
	"TestConformance splits every case's write at every byte, and large frames at a wide sample")

// TestConformance checks the server against RFC 6455's rules for framing,
// pings, reserved bits and opcodes, fragmentation, UTF-8 and closing
// (sections 5 to 7), case by case as the Autobahn testsuite does, with both
// readers. Every case runs as one write, after a {"type":"ping"} in the same
// write, and split in two writes at some points (every point with
// -conformance.full). Each run reads all the server sends until it closes
// the TCP connection and is graded: as required; lenient (not what the RFC
// requires, but harmless); or failed. Any failed run fails the test, and so
// does a case the polled reader handles worse than the parked one.
func TestConformance(t *testing.T) {
	cases := rfcCases()
	results := map[string][]caseResult{}
	for _, mode := range readModes {
		cfg := testConfig()
		cfg.ParkReaders = mode.park
		cfg.MaxMessage = rfcMaxMessage
		// A client that does not answer the server's close frame waits this
		// long for the TCP close.
		cfg.CloseTimeout = 250 * time.Millisecond
		s := startServer(t, cfg)
		results[mode.name] = s.conform(cases, mode.name)
		s.alive(t, mode.name+"-after")
	}

	polled, parked := results["polled"], results["parked"]
	for i, c := range cases {
		for _, r := range []caseResult{polled[i], parked[i]} {
			if r.grade == gradeFailed {
				t.Errorf("%s, %s reader: %s", c.name, r.mode, r.failures())
			}
		}
		assert.GreaterOrEqual(t, polled[i].firm, parked[i].firm,
			"%s: the polled reader does worse than the parked one", c.name)
	}
	t.Log("\n" + conformanceSummary(cases, polled, parked))
}

type grade int

const (
	gradeFailed grade = iota
	gradeLenient
	gradeRequired
)

func (g grade) String() string { return [...]string{"failed", "lenient", "as required"}[g] }

// caseResult is a case's worst grade over its runs with one reader, and
// what the first run so graded saw.
type caseResult struct {
	mode  string
	grade grade
	// firm is grade not counting answers dropped: whether a server answers
	// a frame before it reads the one that fails the connection can be a
	// matter of timing, so the readers are compared on firm.
	firm   grade
	detail string
	runs   int
	// failed counts the failed runs without the leading ping, and after it.
	failed [2]int
}

func (r caseResult) failures() string {
	return fmt.Sprintf("%d of %d runs failed: %d without the leading ping, %d after it",
		r.failed[0]+r.failed[1], r.runs, r.failed[0], r.failed[1])
}

// rfcRun is one connection of a case: its bytes in parts, written with a
// pause between them, and the answers the server owes.
type rfcRun struct {
	kase    int // index in the cases
	pinged  bool
	variant string
	parts   [][]byte
	answers []answer
}

// splitPause is the pause between the two writes of a split run, long
// enough that the server usually reads the first part alone.
const splitPause = 3 * time.Millisecond

// conform runs every case's runs on s, a few connections at a time, and
// grades each case by its worst run.
func (s *testServer) conform(cases []rfcCase, mode string) []caseResult {
	var runs []rfcRun
	for i, c := range cases {
		for _, pinged := range []bool{false, true} {
			send, answers, variant, boundary := c.send, c.answers, "", 0
			if pinged {
				lead := mf(fin|opText, string(appPing))
				send, boundary = frames(lead, c.send), len(lead)
				answers, variant = append([]answer{textPong}, c.answers...), "ping+"
			}
			runs = append(runs, rfcRun{i, pinged, variant + "whole", [][]byte{send}, answers})
			for _, k := range splitPoints(len(send), boundary, *conformanceFull) {
				runs = append(runs, rfcRun{i, pinged, fmt.Sprintf("%ssplit@%d", variant, k), [][]byte{send[:k], send[k:]}, answers})
			}
		}
	}
	results := make([]caseResult, len(cases))
	for i := range results {
		results[i] = caseResult{mode: mode, grade: gradeRequired, firm: gradeRequired}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for j := range work {
				r := runs[j]
				c := cases[r.kase]
				o := s.rawRun(fmt.Sprintf("rfc-%s-%d", mode, j), r.parts, c.end == staysOpen)
				g, firm, why := gradeRun(c, r.answers, o)
				mu.Lock()
				res := &results[r.kase]
				res.runs++
				if g == gradeFailed && r.pinged {
					res.failed[1]++
				} else if g == gradeFailed {
					res.failed[0]++
				}
				res.firm = min(res.firm, firm)
				if g < res.grade {
					res.grade = g
					res.detail = fmt.Sprintf("%s: %s; sent %s; got %s", r.variant, why, showBytes(frames(r.parts...)), o)
				}
				mu.Unlock()
			}
		})
	}
	for j := range runs {
		work <- j
	}
	close(work)
	wg.Wait()
	return results
}

// splitPoints are where a write of n bytes is split: every point with full
// (a wide sample of a large frame's), else a handful. boundary, if not 0,
// is where the leading ping ends.
func splitPoints(n, boundary int, full bool) []int {
	var ks []int
	switch {
	case full && n <= 1024:
		for k := 1; k < n; k++ {
			ks = append(ks, k)
		}
	case full:
		for k := 1; k <= 64; k++ {
			ks = append(ks, k, n-k)
		}
		for k := 1; k < 128; k++ {
			ks = append(ks, k*n/128)
		}
	default:
		ks = []int{1, n / 2, n - 1}
	}
	if boundary > 0 {
		ks = append(ks, boundary, boundary+1)
	}
	slices.Sort(ks)
	ks = slices.Compact(ks)
	return slices.DeleteFunc(ks, func(k int) bool { return k < 1 || k >= n })
}

// srvFrame is a frame the server sent.
type srvFrame struct {
	first   byte // FIN, RSV and opcode
	masked  bool
	payload []byte
}

func (f srvFrame) op() byte { return f.first & 0x0f }

// outcome is what one run saw: the frames after the welcome, and how the
// connection ended.
type outcome struct {
	frames []srvFrame
	end    string // "EOF" or "reset", else why the run could not finish
	ended  bool   // the server closed the TCP connection
}

func (o outcome) String() string {
	var b strings.Builder
	for _, f := range o.frames {
		b.WriteString(showFrame(f) + ", ")
	}
	return b.String() + o.end
}

// rawRun connects as uid, writes parts (pausing between them), then, if
// trailer, a ping "sync" and once it is answered a close 1000, and reads
// what the server sends until it closes the connection.
func (s *testServer) rawRun(uid string, parts [][]byte, trailer bool) outcome {
	c, br, err := s.rawHandshake(uid)
	if err != nil {
		return outcome{end: err.Error()}
	}
	defer c.Close()
	if err := c.SetReadDeadline(time.Now().Add(waitLong)); err != nil {
		return outcome{end: err.Error()}
	}
	f, err := readServerFrame(br)
	if err != nil || f.op() != opText || !strings.Contains(string(f.payload), `"type":"welcome"`) {
		return outcome{end: fmt.Sprintf("no welcome: %s, %v", showFrame(f), err)}
	}
	var o outcome
	synced := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sawSync := false
		for {
			f, err := readServerFrame(br)
			if err != nil {
				o.end, o.ended = endOf(err)
				return
			}
			o.frames = append(o.frames, f)
			if f.op() == opPong && string(f.payload) == "sync" && !sawSync {
				sawSync = true
				close(synced)
			}
		}
	}()
	// Write errors are the server's closing early, which the reader sees.
	for i, p := range parts {
		if i > 0 {
			time.Sleep(splitPause)
		}
		if _, err := c.Write(p); err != nil {
			break
		}
	}
	if trailer {
		_, _ = c.Write(mf(fin|opPing, "sync"))
		// The close only once the ping is answered: a close in the same read
		// as what comes before it is a case of its own.
		select {
		case <-synced:
			_, _ = c.Write(mf(fin|opClose, closeBody(1000, "")))
		case <-done:
		}
	}
	<-done
	return o
}

// rawHandshake is upgradeQuery for goroutines: it returns its failure.
func (s *testServer) rawHandshake(uid string) (net.Conn, *bufio.Reader, error) {
	c, err := net.DialTimeout("tcp", s.addr, waitLong)
	if err != nil {
		return nil, nil, fmt.Errorf("dial: %w", err)
	}
	key := make([]byte, 16)
	_, _ = rand.Read(key)
	_, err = fmt.Fprintf(c, "GET /ws?uid=%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", uid, s.addr, base64.StdEncoding.EncodeToString(key))
	br := bufio.NewReader(c)
	if err == nil {
		err = c.SetReadDeadline(time.Now().Add(waitLong))
	}
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(br, nil)
	}
	if err == nil && resp.StatusCode != http.StatusSwitchingProtocols {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("upgrade %s: %w", uid, err)
	}
	return c, br, nil
}

// readServerFrame reads one frame as sent, without checking it.
func readServerFrame(br *bufio.Reader) (srvFrame, error) {
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return srvFrame{}, err
	}
	f := srvFrame{first: h[0], masked: h[1]&0x80 != 0}
	n := uint64(h[1] & 0x7f)
	var ext []byte
	switch n {
	case 126:
		ext = make([]byte, 2)
	case 127:
		ext = make([]byte, 8)
	}
	if _, err := io.ReadFull(br, ext); err != nil {
		return f, truncated(err)
	}
	switch len(ext) {
	case 2:
		n = uint64(binary.BigEndian.Uint16(ext))
	case 8:
		n = binary.BigEndian.Uint64(ext)
	}
	if n > 1<<20 {
		return f, fmt.Errorf("a frame of %d bytes from the server", n)
	}
	var key [4]byte
	if f.masked {
		if _, err := io.ReadFull(br, key[:]); err != nil {
			return f, truncated(err)
		}
	}
	f.payload = make([]byte, n)
	if _, err := io.ReadFull(br, f.payload); err != nil {
		return f, truncated(err)
	}
	return f, nil
}

// truncated marks the connection ending inside a frame: not a clean end.
func truncated(err error) error { return fmt.Errorf("the connection ended inside a frame: %w", err) }

// endOf says how a connection ended, and whether the server ended it.
func endOf(err error) (string, bool) {
	var ne net.Error
	switch {
	case err == io.EOF:
		return "EOF", true
	case errors.Is(err, syscall.ECONNRESET):
		return "reset", true
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("still open after %v", waitLong), false
	}
	return err.Error(), false
}
