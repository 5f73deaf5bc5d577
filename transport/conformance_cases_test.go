package transport_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// The cases of TestConformance, grouped as the Autobahn testsuite's
// sections 1 to 7 are, plus the message limit. Each says what RFC 6455
// requires of a server that reads its bytes.

const (
	opBinary = 0x2
	rsv1     = 0x40
	rsv2     = 0x20
	rsv3     = 0x10
	// rfcMaxMessage is the test server's MaxMessage: every framing case is
	// within it, up to a 64-bit length.
	rfcMaxMessage = 1<<16 + 1024
)

// answer is a frame the server must send: a control frame (pong) or text
// frame with payload data, or, if anyError, any error frame.
type answer struct {
	op       byte
	data     string
	anyError bool
}

var (
	textPong  = answer{op: opText, data: `{"type":"pong"}`}
	textError = answer{op: opText, anyError: true}
)

func pongOf(payload string) answer { return answer{op: opPong, data: payload} }

// ending is what the RFC requires once the server has read a case's bytes.
type ending int

const (
	// staysOpen: the connection goes on, and then answers the client's ping
	// and close (the trailer) as any open one must.
	staysOpen ending = iota
	// failsWith: the server fails the connection (RFC 6455 7.1.7) with code.
	failsWith
	// echoesClose: the client closed with code (1005: no payload) and the
	// server's close frame answers it (5.5.1, 7.4.1).
	echoesClose
)

type rfcCase struct {
	name    string
	send    []byte
	answers []answer // what the server sends first, in order
	end     ending
	code    int
}

// rfcMask is the masking key of every client frame: not zero, so a server
// that skips unmasking reads garbage.
var rfcMask = [4]byte{0x5a, 0xc3, 0x0f, 0x96}

// wsFrame is a client frame with first as its first header byte (FIN, RSV,
// opcode) and the shortest length field for payload, masked unless told.
func wsFrame(first byte, payload []byte, masked bool) []byte {
	b := []byte{first}
	var m byte
	if masked {
		m = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		b = append(b, m|byte(n))
	case n < 1<<16:
		b = binary.BigEndian.AppendUint16(append(b, m|126), uint16(n))
	default:
		b = binary.BigEndian.AppendUint64(append(b, m|127), uint64(n))
	}
	if !masked {
		return append(b, payload...)
	}
	b = append(b, rfcMask[:]...)
	for i, c := range payload {
		b = append(b, c^rfcMask[i%4])
	}
	return b
}

func mf(first byte, payload string) []byte { return wsFrame(first, []byte(payload), true) }

func frames(fs ...[]byte) []byte { return bytes.Join(fs, nil) }

// closeBody is a close frame's payload: code, then reason.
func closeBody(code int, reason string) string {
	return string(binary.BigEndian.AppendUint16(nil, uint16(code))) + reason
}

// paddedPing is {"type":"ping"} padded with spaces to n bytes, still JSON.
func paddedPing(n int) string { return string(appPing) + strings.Repeat(" ", n-len(appPing)) }

// fragmented is text sent as one fragment per piece, the first a text frame
// and the rest continuations, with between[i] (if any) after fragment i.
func fragmented(op byte, pieces []string, between ...[]byte) []byte {
	var b []byte
	for i, p := range pieces {
		first := byte(opCont)
		if i == 0 {
			first = op
		}
		if i == len(pieces)-1 {
			first |= fin
		}
		b = append(b, mf(first, p)...)
		if i < len(between) {
			b = append(b, between[i]...)
		}
	}
	return b
}

func bytewise(s string) []string {
	out := make([]string, len(s))
	for i := range len(s) {
		out[i] = s[i : i+1]
	}
	return out
}

func rfcCases() []rfcCase {
	var cs []rfcCase
	open := func(name string, send []byte, answers ...answer) {
		cs = append(cs, rfcCase{name: name, send: send, answers: answers, end: staysOpen})
	}
	fail := func(name string, code int, send []byte, answers ...answer) {
		cs = append(cs, rfcCase{name: name, send: send, answers: answers, end: failsWith, code: code})
	}
	echo := func(name string, code int, send []byte, answers ...answer) {
		cs = append(cs, rfcCase{name: name, send: send, answers: answers, end: echoesClose, code: code})
	}

	// 1 Framing: every length field, text (a JSON ping padded with spaces;
	// an empty one is not JSON and gets an error frame) and binary (a
	// keepalive, unanswered).
	lengths := map[int]string{0: "7-bit", 125: "7-bit", 126: "16-bit", 127: "16-bit", 65535: "16-bit", 65536: "64-bit"}
	for _, n := range []int{0, 125, 126, 127, 65535, 65536} {
		if n == 0 {
			open("1 text of 0 bytes (7-bit length): not JSON", mf(fin|opText, ""), textError)
		} else {
			open(fmt.Sprintf("1 text of %d bytes (%s length)", n, lengths[n]), mf(fin|opText, paddedPing(n)), textPong)
		}
		open(fmt.Sprintf("1 binary of %d bytes (%s length)", n, lengths[n]), mf(fin|opBinary, strings.Repeat("\xfe", n)))
	}

	// 2 Pings and pongs.
	open("2 ping, no payload", mf(fin|opPing, ""), pongOf(""))
	open("2 ping of 125 bytes", mf(fin|opPing, strings.Repeat("\xfe", 125)), pongOf(strings.Repeat("\xfe", 125)))
	open("2 ping of binary payload", mf(fin|opPing, "\x00\xff\xfe\xfd\xfc\xfb\x00\xff"), pongOf("\x00\xff\xfe\xfd\xfc\xfb\x00\xff"))
	fail("2 ping of 126 bytes", 1002, mf(fin|opPing, strings.Repeat("\xfe", 126)))
	open("2 unsolicited pong, no payload", mf(fin|opPong, ""))
	open("2 unsolicited pong, then a ping", frames(mf(fin|opPong, "unsolicited"), mf(fin|opPing, "p")), pongOf("p"))
	var tenPings []byte
	var tenPongs []answer
	for i := range 10 {
		tenPings = append(tenPings, mf(fin|opPing, "ping-"+strconv.Itoa(i))...)
		tenPongs = append(tenPongs, pongOf("ping-"+strconv.Itoa(i)))
	}
	open("2 ten pings: ten pongs in order", tenPings, tenPongs...)

	// 3 Reserved bits: no extension is negotiated, so any RSV bit fails.
	for _, rsv := range []struct {
		name string
		bit  byte
	}{{"RSV1", rsv1}, {"RSV2", rsv2}, {"RSV3", rsv3}, {"RSV1-3", rsv1 | rsv2 | rsv3}} {
		fail("3 "+rsv.name+" on text", 1002, mf(fin|rsv.bit|opText, string(appPing)))
		fail("3 "+rsv.name+" on binary", 1002, mf(fin|rsv.bit|opBinary, "\x00\x01"))
		fail("3 "+rsv.name+" on ping", 1002, mf(fin|rsv.bit|opPing, "p"))
		fail("3 "+rsv.name+" on close", 1002, mf(fin|rsv.bit|opClose, closeBody(1000, "")))
	}

	// 4 Opcodes: the reserved ones fail, data (3-7) and control (11-15).
	for _, op := range []byte{3, 4, 5, 6, 7, 11, 12, 13, 14, 15} {
		fail(fmt.Sprintf("4 reserved opcode %d", op), 1002, mf(fin|op, "reserved"))
	}
	fail("4 reserved opcode 5 after a text frame", 1002, frames(mf(fin|opText, string(appPing)), mf(fin|5, "")), textPong)

	// 5 Fragmentation.
	fail("5 fragmented ping", 1002, frames(mf(opPing, "frag"), mf(fin|opCont, "ment")))
	fail("5 fragmented pong", 1002, frames(mf(opPong, "frag"), mf(fin|opCont, "ment")))
	fail("5 fragmented close", 1002, frames(mf(opClose, closeBody(1000, "")), mf(fin|opCont, "")))
	open("5 text in 2 fragments", fragmented(opText, []string{`{"type":`, `"ping"}`}), textPong)
	open("5 binary in 3 fragments", fragmented(opBinary, []string{"\x00\x01", "\x02", "\x03\x04"}))
	open("5 text with empty first and last fragments", fragmented(opText, []string{"", string(appPing), ""}), textPong)
	open("5 text in 2 fragments, a ping between", fragmented(opText, []string{`{"type":`, `"ping"}`}, mf(fin|opPing, "mid")),
		pongOf("mid"), textPong)
	var pings [][]byte
	var midPongs []answer
	for i := range len(appPing) - 1 {
		pings = append(pings, mf(fin|opPing, "f"+strconv.Itoa(i)))
		midPongs = append(midPongs, pongOf("f"+strconv.Itoa(i)))
	}
	open("5 text in 15 fragments, a ping after each", fragmented(opText, bytewise(string(appPing)), pings...),
		append(midPongs, textPong)...)
	fail("5 continuation with no message (FIN)", 1002, mf(fin|opCont, string(appPing)))
	fail("5 continuation with no message (no FIN)", 1002, mf(opCont, string(appPing)))
	fail("5 continuation after a whole text", 1002, frames(mf(fin|opText, string(appPing)), mf(fin|opCont, string(appPing))), textPong)
	fail("5 text while a text is open", 1002, frames(mf(opText, `{"type":`), mf(fin|opText, string(appPing))))
	fail("5 text while a binary is open", 1002, frames(mf(opBinary, "\x00"), mf(fin|opText, string(appPing))))

	// 6 UTF-8: text must be valid UTF-8 as a whole message (8.1).
	open("6 valid 2- and 3-byte UTF-8", mf(fin|opText, `{"type":"ping","text":"κόσμε €"}`), textPong)
	open("6 valid 4-byte UTF-8, the last code point", mf(fin|opText, "{\"type\":\"ping\",\"text\":\"\U0001d11e\U0010ffff\"}"), textPong)
	open("6 valid UTF-8 split inside a code point", fragmented(opText, []string{`{"type":"ping","text":"` + "\xce", "\xba\xe1\xbd\xb9" + `"}`}), textPong)
	open("6 valid UTF-8 one byte a fragment", fragmented(opText, bytewise(`{"type":"ping","x":"κόσμε"}`)), textPong)
	open("6 valid UTF-8, not JSON: an error frame", mf(fin|opText, "Hello-µ@ßöäüàá-UTF-8!!"), textError)
	for _, bad := range []struct{ name, text string }{
		{"a lone 0xff", `{"type":"ping","text":"` + "\xff" + `"}`},
		{"an overlong '/'", `{"type":"ping","text":"` + "\xc0\xaf" + `"}`},
		{"a surrogate U+D800", `{"type":"ping","text":"` + "\xed\xa0\x80" + `"}`},
		{"past U+10FFFF", `{"type":"ping","text":"` + "\xf4\x90\x80\x80" + `"}`},
		{"a bad continuation byte", `{"type":"ping","text":"` + "\xce\x28" + `"}`},
		{"a code point cut at the end", `{"type":"ping","text":"` + "\xce"},
		{"not JSON either", "\xff\xfe\xfd"},
	} {
		fail("6 invalid UTF-8: "+bad.name, 1007, mf(fin|opText, bad.text))
	}
	fail("6 invalid UTF-8 split across fragments", 1007, fragmented(opText, []string{`{"type":"ping","text":"` + "\xce", "\x28" + `"}`}))
	fail("6 invalid UTF-8 in the middle fragment", 1007, fragmented(opText, []string{`{"type":"ping",`, `"text":"` + "\xed\xa0\x80", `"}`}))

	// 7 Close handling.
	echo("7 close, no payload", 1005, mf(fin|opClose, ""))
	echo("7 close, then a text frame: ignored", 1000, frames(mf(fin|opClose, closeBody(1000, "")), mf(fin|opText, string(appPing))))
	echo("7 close, then a ping: ignored", 1000, frames(mf(fin|opClose, closeBody(1000, "")), mf(fin|opPing, "after")))
	fail("7 close with a 1-byte payload", 1002, mf(fin|opClose, "\x03"))
	for _, code := range []int{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000, 4999} {
		echo(fmt.Sprintf("7 close code %d", code), code, mf(fin|opClose, closeBody(code, "")))
	}
	for _, code := range []int{0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535} {
		fail(fmt.Sprintf("7 invalid close code %d", code), 1002, mf(fin|opClose, closeBody(code, "")))
	}
	echo("7 close with a 123-byte reason", 1000, mf(fin|opClose, closeBody(1000, strings.Repeat("*", 123))))
	echo("7 close with a UTF-8 reason", 1000, mf(fin|opClose, closeBody(1000, "κόσμε")))
	fail("7 close with a 124-byte reason (126-byte payload)", 1002, mf(fin|opClose, closeBody(1000, strings.Repeat("*", 124))))
	fail("7 close reason not UTF-8", 1007, mf(fin|opClose, closeBody(1000, "\xce\x28")))

	// Masking (5.1) and the message limit (7.4.1's 1009).
	fail("5.1 unmasked text", 1002, wsFrame(fin|opText, appPing, false))
	fail("5.1 unmasked ping", 1002, wsFrame(fin|opPing, []byte("p"), false))
	fail("5.1 unmasked close", 1002, wsFrame(fin|opClose, []byte(closeBody(1000, "")), false))
	fail("9 text over MaxMessage", 1009, mf(fin|opText, paddedPing(rfcMaxMessage+1)))
	fail("9 binary over MaxMessage", 1009, mf(fin|opBinary, strings.Repeat("\x00", rfcMaxMessage+1)))
	fail("9 text fragments over MaxMessage", 1009, fragmented(opText, []string{paddedPing(rfcMaxMessage / 2), strings.Repeat(" ", rfcMaxMessage/2+1)}))
	// Only the header and a little of a 1 MiB frame: the server must not
	// wait for the rest to refuse it.
	fail("9 text header far over MaxMessage", 1009, mf(fin|opText, paddedPing(1<<20))[:4096])
	return cs
}
