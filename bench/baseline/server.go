package main

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// The usual constants of gorilla's chat example, with pongWait set by -timeout.
const (
	writeWait      = 10 * time.Second
	maxMessageSize = 4096
	sendQueue      = 256
	closeIdle      = 4408
)

var uidPattern = regexp.MustCompile(`^[A-Za-z0-9_.@-]{1,64}$`)

// server holds every connection, as the chat example's hub does.
type server struct {
	pongWait   time.Duration
	pingPeriod time.Duration
	log        *slog.Logger
	upgrader   websocket.Upgrader

	mu    sync.Mutex
	conns map[*conn]struct{}
}

type conn struct {
	ws   *websocket.Conn
	send chan []byte
	done chan struct{}
	once sync.Once
}

func newServer(timeout time.Duration, log *slog.Logger) *server {
	return &server{
		pongWait:   timeout,
		pingPeriod: timeout * 9 / 10,
		log:        log,
		upgrader:   websocket.Upgrader{ReadBufferSize: 1024, WriteBufferSize: 1024},
		conns:      make(map[*conn]struct{}),
	}
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	uid := r.URL.Query().Get("uid")
	if !uidPattern.MatchString(uid) {
		http.Error(w, "bad uid", http.StatusBadRequest)
		return
	}
	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade has answered the client
	}
	c := &conn{ws: ws, send: make(chan []byte, sendQueue), done: make(chan struct{})}
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()

	welcome, _ := json.Marshal(map[string]any{
		"type": "welcome", "uid": uid, "timeout_ms": s.pongWait.Milliseconds(), "online": []string{uid},
	})
	c.send <- welcome
	go s.writePump(c)
	go s.readPump(c)
}

// readPump is the connection's only reader. A read deadline that nothing
// extends expires after pongWait of silence and ends the connection.
func (s *server) readPump(c *conn) {
	code, reason := websocket.CloseNormalClosure, ""
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.stop(code, reason)
	}()
	c.ws.SetReadLimit(maxMessageSize)
	_ = c.ws.SetReadDeadline(time.Now().Add(s.pongWait))
	c.ws.SetPongHandler(func(string) error {
		return c.ws.SetReadDeadline(time.Now().Add(s.pongWait))
	})
	for {
		_, msg, err := c.ws.ReadMessage()
		if err != nil {
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				code, reason = closeIdle, "idle timeout"
			case errors.Is(err, websocket.ErrReadLimit):
				code, reason = websocket.CloseMessageTooBig, "message too big"
			}
			return
		}
		_ = c.ws.SetReadDeadline(time.Now().Add(s.pongWait))
		var in struct {
			Type string `json:"type"`
		}
		var out []byte
		switch err := json.Unmarshal(msg, &in); {
		case err != nil:
			out = []byte(`{"type":"error","error":"invalid JSON"}`)
		case in.Type == "ping":
			out = []byte(`{"type":"pong"}`)
		default:
			out = []byte(`{"type":"error","error":"unknown type"}`)
		}
		select {
		case c.send <- out:
		default:
			code, reason = websocket.ClosePolicyViolation, "send queue full"
			return
		}
	}
}

// writePump is the connection's only writer: queued frames and a ping per
// pingPeriod from its own ticker.
func (s *server) writePump(c *conn) {
	ticker := time.NewTicker(s.pingPeriod)
	defer ticker.Stop()
	for {
		select {
		case msg := <-c.send:
			_ = c.ws.SetWriteDeadline(time.Now().Add(writeWait))
			if err := c.ws.WriteMessage(websocket.TextMessage, msg); err != nil {
				c.stop(websocket.CloseAbnormalClosure, "")
				return
			}
		case <-ticker.C:
			_ = c.ws.SetWriteDeadline(time.Now().Add(writeWait))
			if err := c.ws.WriteMessage(websocket.PingMessage, nil); err != nil {
				c.stop(websocket.CloseAbnormalClosure, "")
				return
			}
		case <-c.done:
			return
		}
	}
}

// stop sends a close frame (unless code says the connection is already
// broken) and closes the socket, once.
func (c *conn) stop(code int, reason string) {
	c.once.Do(func() {
		close(c.done)
		if code != websocket.CloseAbnormalClosure {
			msg := websocket.FormatCloseMessage(code, reason)
			_ = c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(writeWait))
		}
		_ = c.ws.Close()
	})
}

// closeAll ends every connection with 1001, as a server going away does.
func (s *server) closeAll() {
	s.mu.Lock()
	cs := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	for _, c := range cs {
		c.stop(websocket.CloseGoingAway, "server shutdown")
	}
}
