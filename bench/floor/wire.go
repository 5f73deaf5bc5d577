//go:build linux

package main

import (
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"net/url"
	"strconv"
)

// Close codes the floor sends, and dropNow: close the socket without one.
const (
	dropNow         = -1
	closeGoingAway  = 1001
	closeProtocol   = 1002
	closeTooBig     = 1009
	closeIdle       = 4408
	maxPayload      = 4096
	maxRequest      = 8192
	websocketGUID   = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
	protocolVersion = "2.2"
)

var (
	pingJSON  = []byte(`{"type":"ping"}`)
	pongFrame = textFrame(nil, []byte(`{"type":"pong"}`))
	// errorFrame answers any other text: the floor decodes nothing.
	errorFrame  = textFrame(nil, []byte(`{"type":"error","error":"the floor answers only {\"type\":\"ping\"}"}`))
	closeFrames = map[int][]byte{
		closeGoingAway: closeFrame(closeGoingAway, "server shutdown"),
		closeProtocol:  closeFrame(closeProtocol, "protocol error"),
		closeTooBig:    closeFrame(closeTooBig, "message too big"),
		closeIdle:      closeFrame(closeIdle, "idle timeout"),
	}
	crlf       = []byte("\r\n")
	healthy    = []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	badRequest = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: "
)

// textFrame appends an unmasked, final text frame of payload (under 64 KiB).
func textFrame(b, payload []byte) []byte { return frame(b, 0x81, payload) }

func frame(b []byte, first byte, payload []byte) []byte {
	if len(payload) < 126 {
		b = append(b, first, byte(len(payload)))
	} else {
		b = append(b, first, 126, byte(len(payload)>>8), byte(len(payload)))
	}
	return append(b, payload...)
}

func closeFrame(code int, reason string) []byte {
	return frame(nil, 0x88, append(binary.BigEndian.AppendUint16(nil, uint16(code)), reason...))
}

// upgrade answers a whole upgrade request at the start of data with 101 and
// the welcome and opens c, or answers with 400 or the health check and
// dropNow. It returns the bytes it did not use: all of data while the
// request is not yet whole, the first frames after it otherwise.
func (s *server) upgrade(c *conn, data []byte, now int64) (rest []byte, end int) {
	i := bytes.Index(data, []byte("\r\n\r\n"))
	if i < 0 {
		if len(data) > maxRequest {
			return nil, s.refuse("request too large")
		}
		return data, 0
	}
	head, rest := data[:i], data[i+4:]
	line, headers, _ := bytes.Cut(head, crlf)
	target, ok := bytes.CutPrefix(line, []byte("GET "))
	target, ok2 := bytes.CutSuffix(target, []byte(" HTTP/1.1"))
	if !ok || !ok2 {
		return nil, s.refuse("not a GET over HTTP/1.1")
	}
	path, query, _ := bytes.Cut(target, []byte("?"))
	switch string(path) {
	case "/healthz":
		s.out = append(s.out, healthy...)
		return nil, dropNow
	case "/ws":
	default:
		return nil, s.refuse("no such path")
	}
	var key []byte
	upgrade := false
	for len(headers) > 0 {
		var h []byte
		h, headers, _ = bytes.Cut(headers, crlf)
		name, value, _ := bytes.Cut(h, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Sec-WebSocket-Key")):
			key = value
		case bytes.EqualFold(name, []byte("Upgrade")):
			upgrade = bytes.EqualFold(value, []byte("websocket"))
		}
	}
	if !upgrade || len(key) == 0 {
		return nil, s.refuse("not a WebSocket upgrade")
	}
	uid := queryUID(query)
	if !validUID(uid) {
		return nil, s.refuse("bad uid")
	}
	s.scratch = append(append(s.scratch[:0], key...), websocketGUID...)
	sum := sha1.Sum(s.scratch)
	s.out = append(s.out, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "...)
	s.out = base64.StdEncoding.AppendEncode(s.out, sum[:])
	s.out = append(s.out, "\r\n\r\n"...)
	s.scratch = append(append(append(s.scratch[:0], `{"type":"welcome","uid":"`...), uid...), `","timeout_ms":`...)
	s.scratch = strconv.AppendInt(s.scratch, s.timeout/1e6, 10)
	s.scratch = append(s.scratch, `,"protocol":"`+protocolVersion+`"}`...)
	s.out = textFrame(s.out, s.scratch)
	c.state, c.last = open, now
	return s.frames(c, rest, now)
}

func (s *server) refuse(why string) int {
	s.out = append(s.out, badRequest...)
	s.out = strconv.AppendInt(s.out, int64(len(why)), 10)
	s.out = append(s.out, "\r\n\r\n"...)
	s.out = append(s.out, why...)
	return dropNow
}

// frames answers the whole client frames at the start of data and returns
// the bytes of a frame not yet whole, or the code to close with.
func (s *server) frames(c *conn, data []byte, now int64) (rest []byte, end int) {
	for len(data) >= 2 {
		b0, b1 := data[0], data[1]
		if b1&0x80 == 0 || b0&0x70 != 0 || b0&0x80 == 0 {
			return nil, closeProtocol // unmasked, reserved bits, or a fragment
		}
		n, h := int(b1&0x7f), 2
		switch n {
		case 126:
			if len(data) < 4 {
				return data, 0
			}
			n, h = int(binary.BigEndian.Uint16(data[2:])), 4
		case 127:
			return nil, closeTooBig
		}
		if n > maxPayload {
			return nil, closeTooBig
		}
		if len(data) < h+4+n {
			return data, 0
		}
		mask, p := data[h:h+4], data[h+4:h+4+n]
		for i := range p {
			p[i] ^= mask[i&3]
		}
		data = data[h+4+n:]
		switch op := b0 & 0x0f; op {
		case 0x1, 0x2:
			c.last = now
			if bytes.Equal(p, pingJSON) {
				s.out = append(s.out, pongFrame...)
			} else {
				s.out = append(s.out, errorFrame...)
			}
		case 0x8: // echo the client's code, then hang up
			s.out = frame(s.out, 0x88, p[:min(len(p), 2)])
			return nil, dropNow
		case 0x9:
			if n > 125 {
				return nil, closeProtocol
			}
			c.last = now
			s.out = frame(s.out, 0x8a, p)
		case 0xa:
			c.last = now
		default:
			return nil, closeProtocol
		}
	}
	return data, 0
}

// queryUID is the uid parameter of a query string. A user ID has nothing to
// escape, so one sent escaped is unescaped at the cost of an allocation.
func queryUID(query []byte) []byte {
	for len(query) > 0 {
		var pair []byte
		pair, query, _ = bytes.Cut(query, []byte("&"))
		k, v, _ := bytes.Cut(pair, []byte("="))
		if string(k) != "uid" {
			continue
		}
		if bytes.ContainsAny(v, "%+") {
			u, err := url.QueryUnescape(string(v))
			if err != nil {
				return nil
			}
			return []byte(u)
		}
		return v
	}
	return nil
}

// validUID is presenced's demo-mode rule: 1 to 64 of A-Z a-z 0-9 _ . @ -.
func validUID(s []byte) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := range len(s) {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '.', c == '@', c == '-':
		default:
			return false
		}
	}
	return true
}
