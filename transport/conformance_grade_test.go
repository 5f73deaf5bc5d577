package transport_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
)

// How TestConformance grades a run, and its summary.

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
