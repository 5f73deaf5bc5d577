package transport

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// frame builds a client frame: first is the first header byte (FIN, RSV,
// opcode), masked with a fixed key.
func frame(first byte, payload string) []byte { return clientFrame(first, []byte(payload), true) }

// clientFrame builds a frame as a client sends it, masked or not.
func clientFrame(first byte, payload []byte, masked bool) []byte {
	b := []byte{first}
	var maskBit byte
	if masked {
		maskBit = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		b = append(b, maskBit|byte(n))
	case n < 1<<16:
		b = append(b, maskBit|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, maskBit|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	if !masked {
		return append(b, payload...)
	}
	key := []byte{1, 2, 3, 4}
	b = append(b, key...)
	for i, c := range payload {
		b = append(b, c^key[i%4])
	}
	return b
}

func cat(frames ...[]byte) []byte {
	var b []byte
	for _, f := range frames {
		b = append(b, f...)
	}
	return b
}

func TestUnit(t *testing.T) {
	text := frame(0x81, "hello")
	ping := frame(0x89, "p")
	first := frame(0x01, "hel")
	last := frame(0x80, "lo")
	cases := []struct {
		name     string
		in       []byte
		end      int
		controls [][2]int
	}{
		{"nothing", nil, 0, nil},
		{"half a header", text[:1], 0, nil},
		{"half a payload", text[:len(text)-1], 0, nil},
		{"a message", text, len(text), nil},
		{"a message and half of the next", cat(text, text[:3]), len(text), nil},
		{"a ping before a message", cat(ping, text), len(ping) + len(text), nil},
		{"a ping alone", ping, 0, [][2]int{{0, len(ping)}}},
		{"a ping then half a message", cat(ping, text[:4]), 0, [][2]int{{0, len(ping)}}},
		{"fragments", cat(first, last), len(first) + len(last), nil},
		{"a ping between fragments", cat(first, ping, last), len(first) + len(ping) + len(last), nil},
		{"a ping inside an unfinished message", cat(first, ping), 0, [][2]int{{len(first), len(first) + len(ping)}}},
		{"unmasked: handed over at its header", cat(ping, []byte{0x81, 0x05, 'h'}), len(ping) + 2, nil},
		{"RSV1: at its header", cat(frame(0xc1, "x")), 6, nil},
		{"unknown opcode", frame(0x83, "x"), 6, nil},
		{"a control frame of 126 bytes", frame(0x89, string(make([]byte, 126))), 8, nil},
		{"a fragmented control frame", frame(0x09, "x"), 6, nil},
		{"a continuation with no message", frame(0x80, "x"), 6, nil},
		{"a message inside a message", cat(first, frame(0x81, "x")), len(first) + 6, nil},
		{"over the limit: at its header", frame(0x81, string(make([]byte, 200)))[:10], 8, nil},
		{"fragments over the limit", cat(frame(0x01, string(make([]byte, 60))), frame(0x80, string(make([]byte, 60)))), 66 + 6, nil},
		{"a length that overflows", []byte{0x81, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4}, 14, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			end, controls := unit(tc.in, 100)
			assert.Equal(t, tc.end, end, "end")
			assert.Equal(t, tc.controls, controls, "controls")
		})
	}
}

// streamConn is a socket that reads from a byte stream and swallows writes.
type streamConn struct{ r io.Reader }

func (s streamConn) Read(p []byte) (int, error) {
	if s.r == nil {
		return 0, errors.New("not readable")
	}
	return s.r.Read(p)
}
func (streamConn) Write(p []byte) (int, error)      { return len(p), nil }
func (streamConn) Close() error                     { return nil }
func (streamConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (streamConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (streamConn) SetDeadline(time.Time) error      { return nil }
func (streamConn) SetReadDeadline(time.Time) error  { return nil }
func (streamConn) SetWriteDeadline(time.Time) error { return nil }

// hijackRecorder is a ResponseWriter whose Hijack returns nc.
type hijackRecorder struct {
	*httptest.ResponseRecorder
	nc net.Conn
}

func (h hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return h.nc, bufio.NewReadWriter(bufio.NewReader(h.nc), bufio.NewWriter(h.nc)), nil
}

// serverConn upgrades over nc as the Hub does, and records what gorilla
// reports in events: control frames through the handlers, messages by
// the caller.
func serverConn(t testing.TB, nc net.Conn, limit int64, events *[]string) *websocket.Conn {
	r := httptest.NewRequest(http.MethodGet, "/ws", nil)
	r.Header.Set("Upgrade", "websocket")
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Sec-WebSocket-Version", "13")
	r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	u := websocket.Upgrader{ReadBufferSize: readBufferSize, CheckOrigin: func(*http.Request) bool { return true }}
	ws, err := u.Upgrade(hijackRecorder{httptest.NewRecorder(), nc}, r, nil)
	require.NoError(t, err)
	ws.SetReadLimit(limit)
	ws.SetPingHandler(func(s string) error { *events = append(*events, "ping "+s); return nil })
	ws.SetPongHandler(func(s string) error { *events = append(*events, "pong "+s); return nil })
	ws.SetCloseHandler(func(code int, text string) error {
		*events = append(*events, fmt.Sprintf("close %d %s", code, text))
		return nil
	})
	return ws
}

// readOne reads one message as conn.readMessage does and records it,
// unless it is the frame ending a unit of control frames.
func readOne(ws *websocket.Conn, w *wire, events *[]string) error {
	mt, r, err := ws.NextReader()
	if err != nil {
		return err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if w == nil || !w.synthetic() {
		*events = append(*events, fmt.Sprintf("message %d %q", mt, data))
	}
	return nil
}

// directly is what gorilla reads from the whole stream on its own.
func directly(t testing.TB, stream []byte, limit int64) []string {
	var events []string
	ws := serverConn(t, streamConn{r: bytesReader(stream)}, limit, &events)
	for {
		if err := readOne(ws, nil, &events); err != nil {
			return append(events, "error "+err.Error())
		}
	}
}

// throughWire is what gorilla reads when the stream arrives in chunks and
// is handed over unit by unit as a polled connection's worker does; ok is
// false if the worker would refuse the stream as too big before gorilla.
func throughWire(t testing.TB, stream []byte, chunks []int, limit int64) (events []string, ok bool) {
	w := &wire{polled: true, in: new(inbound)}
	w.Conn = streamConn{}
	in := w.in
	ws := serverConn(t, w, limit, &events)
	for _, n := range chunks {
		n = min(n, len(stream))
		in.pending = append(in.pending, stream[:n]...)
		stream = stream[n:]
		if len(in.pending) >= int(limit)+readChunk {
			return nil, false
		}
		for in.next(limit) {
			err := readOne(ws, w, &events)
			if err == nil {
				err = in.drop()
			}
			if err != nil {
				return append(events, "error "+err.Error()), true
			}
		}
	}
	in.fed, in.rerr = in.pending, io.EOF
	for {
		if err := readOne(ws, w, &events); err != nil {
			return append(events, "error "+err.Error()), true
		}
	}
}

type byteReader struct{ b []byte }

func bytesReader(b []byte) *byteReader { return &byteReader{b} }

func (r *byteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// chunking cuts a stream of n bytes at the sizes cuts gives, cycled.
func chunking(n int, cuts []byte) []int {
	var sizes []int
	for i := 0; n > 0; i++ {
		size := n
		if len(cuts) > 0 {
			size = min(n, int(cuts[i%len(cuts)])%23+1)
		}
		sizes = append(sizes, size)
		n -= size
	}
	return sizes
}

// FuzzWireUnits checks that handing gorilla whole units, from a stream cut
// anywhere, makes it report the same frames, control frames and error as
// reading the stream itself.
func FuzzWireUnits(f *testing.F) {
	text, ping, pong := frame(0x81, `{"type":"ping"}`), frame(0x89, "p"), frame(0x8a, "")
	first, mid, last := frame(0x01, `{"ty`), frame(0x00, `pe":"pi`), frame(0x80, `ng"}`)
	closeFrame := frame(0x88, "\x03\xe8bye")
	seeds := [][]byte{
		text,
		cat(text, ping, text, pong),
		cat(first, ping, mid, pong, last, text),
		cat(first, ping, mid),
		cat(ping, closeFrame, text),
		cat(first, closeFrame),
		cat(text, frame(0x81, string(make([]byte, 300)))),
		cat(first, frame(0x81, "x")),
		cat(ping, []byte{0x81, 0x05, 'h', 'e', 'l', 'l', 'o'}),
		cat(frame(0x88, "\x00\x01"), text),
		cat(frame(0x82, "\x00\xff"), text[:7]),
	}
	for _, s := range seeds {
		f.Add(s, []byte{0})
		f.Add(s, []byte{1, 4, 9})
	}
	const limit = 256
	f.Fuzz(func(t *testing.T, stream, cuts []byte) {
		want := directly(t, stream, limit)
		got, ok := throughWire(t, stream, chunking(len(stream), cuts), limit)
		if !ok {
			return // refused as too big, before gorilla saw it
		}
		require.Equal(t, want, got)
	})
}
