package transport_test

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
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
	"text/tabwriter"
	"time"
	"unicode/utf8"

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
	c       int
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
				c := cases[r.c]
				o := s.rawRun(fmt.Sprintf("rfc-%s-%d", mode, j), r.parts, c.end == staysOpen)
				g, firm, why := gradeRun(c, r.answers, o)
				mu.Lock()
				res := &results[r.c]
				res.runs++
				if g == gradeFailed && r.pinged {
					res.failed[1]++
				} else if g == gradeFailed {
					res.failed[0]++
				}
				res.firm = min(res.firm, firm)
				if g < res.grade || (g == res.grade && g != gradeRequired && res.detail == "") {
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

// gradeRun grades what one run of c saw, given the answers it is owed, and
// grades it again not counting answers dropped before the server's close
// (firm).
func gradeRun(c rfcCase, want []answer, o outcome) (g, firm grade, why string) {
	if !o.ended {
		return gradeFailed, gradeFailed, "the server did not close the connection"
	}
	got := o.frames
	for _, f := range got {
		if f.masked || f.first&0x70 != 0 || f.first&fin == 0 {
			return gradeFailed, gradeFailed, "the server sent a masked, reserved-bit or fragmented frame"
		}
	}
	ci := slices.IndexFunc(got, func(f srvFrame) bool { return f.op() == opClose })
	if ci >= 0 && ci < len(got)-1 {
		return gradeFailed, gradeFailed, fmt.Sprintf("%d frames after the server's close frame", len(got)-1-ci)
	}
	body := got
	var code int
	if ci >= 0 {
		body = got[:ci]
		var ok bool
		if code, ok = closeFrameCode(got[ci].payload); !ok {
			return gradeFailed, gradeFailed, "the server's close frame is malformed"
		}
	}
	if c.end == staysOpen {
		want = append(slices.Clip(want), pongOf("sync"))
		switch {
		case !answersMatch(body, want):
			return gradeFailed, gradeFailed, fmt.Sprintf("want %s then a close 1000", showAnswers(want))
		case ci < 0 || code != 1000:
			return gradeFailed, gradeFailed, "want a close 1000 echoing the client's"
		}
		return gradeRequired, gradeRequired, ""
	}
	if len(body) > len(want) || !answersMatch(body, want[:len(body)]) {
		return gradeFailed, gradeFailed, fmt.Sprintf("want %s, some maybe dropped, then a close", showAnswers(want))
	}
	var lenient []string
	firm = gradeRequired
	if len(body) < len(want) {
		lenient = append(lenient, fmt.Sprintf("%d of %d answers dropped", len(want)-len(body), len(want)))
	}
	switch {
	case ci < 0:
		lenient, firm = append(lenient, "no close frame, only the TCP close"), gradeLenient
	case c.end == failsWith && code != c.code:
		lenient, firm = append(lenient, fmt.Sprintf("close %d where the RFC requires %d", code, c.code)), gradeLenient
	case c.end == echoesClose && code != c.code && code != 1000:
		return gradeFailed, gradeFailed, fmt.Sprintf("close %d does not answer the client's %d", code, c.code)
	}
	if len(lenient) > 0 {
		return gradeLenient, firm, strings.Join(lenient, "; ")
	}
	return gradeRequired, gradeRequired, ""
}

// closeFrameCode is the code of a close frame's payload (1005 if it has
// none), and whether an endpoint may send it (RFC 6455 5.5.1, 7.4).
func closeFrameCode(p []byte) (int, bool) {
	if len(p) == 0 {
		return 1005, true
	}
	if len(p) == 1 || !utf8.Valid(p[2:]) {
		return 0, false
	}
	code := int(binary.BigEndian.Uint16(p))
	ok := (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999)
	return code, ok
}

func answersMatch(got []srvFrame, want []answer) bool {
	if len(got) != len(want) {
		return false
	}
	for i, w := range want {
		f := got[i]
		if f.op() != w.op {
			return false
		}
		if w.anyError {
			var m struct{ Type string }
			if json.Unmarshal(f.payload, &m) != nil || m.Type != "error" {
				return false
			}
		} else if string(f.payload) != w.data {
			return false
		}
	}
	return true
}

func showFrame(f srvFrame) string {
	name := map[byte]string{opText: "text", opBinary: "binary", opClose: "close", opPing: "ping", opPong: "pong"}[f.op()]
	if name == "" {
		name = fmt.Sprintf("op%d", f.op())
	}
	if f.op() == opClose {
		if code, ok := closeFrameCode(f.payload); ok && len(f.payload) >= 2 {
			return fmt.Sprintf("close %d %q", code, f.payload[2:])
		}
	}
	return fmt.Sprintf("%s %s", name, clip(fmt.Sprintf("%q", f.payload)))
}

func showAnswers(as []answer) string {
	if len(as) == 0 {
		return "no answer"
	}
	var s []string
	for _, a := range as {
		switch {
		case a.anyError:
			s = append(s, "an error frame")
		default:
			s = append(s, showFrame(srvFrame{first: fin | a.op, payload: []byte(a.data)}))
		}
	}
	return strings.Join(s, ", ")
}

func showBytes(b []byte) string { return clip(fmt.Sprintf("%d bytes % x", len(b), b)) }

func clip(s string) string {
	if len(s) > 160 {
		return s[:160] + "…"
	}
	return s
}

// conformanceSummary is a table of every case's grade with each reader,
// then the counts.
func conformanceSummary(cases []rfcCase, polled, parked []caseResult) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "case\tpolled\tparked\truns")
	counts := map[string]map[grade]int{"polled": {}, "parked": {}}
	var notes []string
	for i, c := range cases {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d+%d\n", c.name, polled[i].grade, parked[i].grade, polled[i].runs, parked[i].runs)
		for _, r := range []caseResult{polled[i], parked[i]} {
			counts[r.mode][r.grade]++
			if r.grade != gradeRequired {
				notes = append(notes, fmt.Sprintf("%s, %s reader, %s (%s): %s", c.name, r.mode, r.grade, r.failures(), r.detail))
			}
		}
	}
	tw.Flush()
	b.WriteString(strings.Join(notes, "\n") + "\n")
	for _, mode := range []string{"polled", "parked"} {
		fmt.Fprintf(&b, "%s reader: %d cases: %d as required, %d lenient, %d failed\n", mode, len(cases),
			counts[mode][gradeRequired], counts[mode][gradeLenient], counts[mode][gradeFailed])
	}
	return b.String()
}

// The grading must not be fooled: a pong after the server's close frame
// fails a run, a pong lost is lenient, and so on.
func TestConformanceGrading(t *testing.T) {
	closeOf := func(code int) srvFrame { return srvFrame{first: fin | opClose, payload: []byte(closeBody(code, ""))} }
	pong := srvFrame{first: fin | opText, payload: []byte(textPong.data)}
	sync := srvFrame{first: fin | opPong, payload: []byte("sync")}
	failing := rfcCase{end: failsWith, code: 1002}
	open := rfcCase{end: staysOpen}
	closing := rfcCase{end: echoesClose, code: 3000}
	cases := []struct {
		name    string
		c       rfcCase
		frames  []srvFrame
		ended   bool
		g, firm grade
	}{
		{"pong then close", failing, []srvFrame{pong, closeOf(1002)}, true, gradeRequired, gradeRequired},
		{"close then pong", failing, []srvFrame{closeOf(1002), pong}, true, gradeFailed, gradeFailed},
		{"pong dropped", failing, []srvFrame{closeOf(1002)}, true, gradeLenient, gradeRequired},
		{"no close frame", failing, []srvFrame{pong}, true, gradeLenient, gradeLenient},
		{"another code", failing, []srvFrame{pong, closeOf(1000)}, true, gradeLenient, gradeLenient},
		{"still open", failing, []srvFrame{pong, closeOf(1002)}, false, gradeFailed, gradeFailed},
		{"two pongs", failing, []srvFrame{pong, pong, closeOf(1002)}, true, gradeFailed, gradeFailed},
		{"a code no endpoint sends", failing, []srvFrame{pong, closeOf(1005)}, true, gradeFailed, gradeFailed},
		{"open: answered", open, []srvFrame{pong, sync, closeOf(1000)}, true, gradeRequired, gradeRequired},
		{"open: answer lost", open, []srvFrame{sync, closeOf(1000)}, true, gradeFailed, gradeFailed},
		{"open: failed", open, []srvFrame{pong, closeOf(1002)}, true, gradeFailed, gradeFailed},
		{"close echoed", closing, []srvFrame{pong, closeOf(3000)}, true, gradeRequired, gradeRequired},
		{"close answered 1000", closing, []srvFrame{pong, closeOf(1000)}, true, gradeRequired, gradeRequired},
		{"close refused", closing, []srvFrame{pong, closeOf(1002)}, true, gradeFailed, gradeFailed},
	}
	for _, tc := range cases {
		g, firm, why := gradeRun(tc.c, []answer{textPong}, outcome{frames: tc.frames, ended: tc.ended})
		assert.Equal(t, tc.g, g, "%s: %s", tc.name, why)
		assert.Equal(t, tc.firm, firm, "%s: %s", tc.name, why)
	}
}
