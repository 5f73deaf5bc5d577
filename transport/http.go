package transport

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// apiTimeout bounds an engine query made for one HTTP request.
const apiTimeout = 5 * time.Second

func (h *Hub) routes() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", h.ServeWS)
	mux.HandleFunc("GET /api/presence", h.servePresence)
	mux.HandleFunc("GET /api/presence/{uid}", h.serveUser)
	mux.HandleFunc("GET /api/channels/{channel}", h.serveChannel)
	mux.HandleFunc("POST /api/heartbeat", h.serveHeartbeat)
	mux.HandleFunc("GET /api/ring", h.serveRing)
	mux.HandleFunc("GET /healthz", h.serveHealth)
	h.mux = mux
}

// ServeHTTP serves GET /ws, GET /api/presence, GET /api/presence/{uid},
// GET /api/channels/{channel}, POST /api/heartbeat, GET /api/ring and
// GET /healthz; other paths get 404.
// Mount it for "/ws", "/api/" and "/healthz" in a larger mux.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// identify applies the origin and identity rules shared by /ws and
// /api/heartbeat, and reads ?channels=, writing the error response (403,
// 401, 400 or 503) itself.
func (h *Hub) identify(w http.ResponseWriter, r *http.Request) (string, []string, bool) {
	if !h.origins.allow(r) {
		writeError(w, http.StatusForbidden, "origin not allowed")
		return "", nil, false
	}
	uid, err := h.auth.Authenticate(r)
	if err == nil && !ValidUID(uid) {
		err = ErrInvalidUID
	}
	if err != nil {
		h.log.Debug("transport: refused", "remote", r.RemoteAddr, "err", err)
		writeError(w, authStatus(err), err.Error())
		return "", nil, false
	}
	var channels []string
	if list := r.URL.Query().Get("channels"); list != "" {
		if channels, err = h.node.CheckChannels(strings.Split(list, ",")); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return "", nil, false
		}
	}
	h.mu.Lock()
	closing := h.closing
	h.mu.Unlock()
	if closing {
		writeError(w, http.StatusServiceUnavailable, "shutting down")
		return "", nil, false
	}
	return uid, channels, true
}

// ServeWS upgrades r to a WebSocket for the user the Authenticator names and
// serves it until it closes. Use it to mount the socket at a path of your
// own; ServeHTTP mounts it at /ws.
func (h *Hub) ServeWS(w http.ResponseWriter, r *http.Request) {
	uid, channels, ok := h.identify(w, r)
	if !ok {
		return
	}
	ws, err := h.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered with an HTTP error
	}
	ws.SetReadLimit(h.maxMessage)
	if sb, ok := ws.NetConn().(interface{ SetWriteBuffer(int) error }); ok && h.socketBuffer > 0 {
		if err := sb.SetWriteBuffer(h.socketBuffer); err != nil {
			h.log.Debug("transport: set socket send buffer", "err", err)
		}
	}
	c := &conn{hub: h, uid: uid, ws: ws}
	ws.SetPingHandler(c.pingHandler)
	ws.SetPongHandler(c.pongHandler)

	h.mu.Lock()
	if h.closing {
		h.mu.Unlock()
		goingAway(ws, h.writeTimeout)
		return
	}
	h.live[c] = struct{}{}
	h.readers.Add(1)
	h.mu.Unlock()
	h.m.connections.Inc()
	c.touch()

	// The welcome goes first; the node's joined snapshots follow it, and the
	// writer holds back what arrives before the welcome is queued.
	welcome := mustJSON(welcomeFrame{Type: "welcome", UID: uid, TimeoutMS: h.Timeout().Milliseconds()})
	h.m.sent(welcome)
	c.sendWelcome(welcome)
	if err := h.node.Connect(c, uid, channels); err != nil {
		c.closeWith(websocket.CloseGoingAway, "server shutdown", reasonShutdown)
	}
	// A goroutine of its own, so the handler returns and net/http's request,
	// response and buffers are freed: an idle connection keeps only its
	// reader's small stack.
	go c.readLoop()
}

func goingAway(ws *websocket.Conn, timeout time.Duration) {
	ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "server shutdown"), time.Now().Add(timeout))
	ws.Close()
}

// queryLimit reads ?limit= of a listing: DefaultPresenceLimit when absent,
// at most MaxPresenceLimit. It answers 400 itself when limit is malformed.
func queryLimit(w http.ResponseWriter, r *http.Request) (int, bool) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return DefaultPresenceLimit, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		writeError(w, http.StatusBadRequest, "limit must be a non-negative integer")
		return 0, false
	}
	return min(n, MaxPresenceLimit), true
}

func (h *Hub) servePresence(w http.ResponseWriter, r *http.Request) {
	limit, ok := queryLimit(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	count, users, err := h.node.Users(ctx, limit)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "presence unavailable: "+err.Error())
		return
	}
	if users == nil {
		users = []string{}
	}
	writeJSON(w, http.StatusOK, struct {
		Count int      `json:"count"`
		Users []string `json:"users"`
	}{count, users})
}

func (h *Hub) serveUser(w http.ResponseWriter, r *http.Request) {
	uid := r.PathValue("uid")
	if !ValidUID(uid) {
		writeError(w, http.StatusBadRequest, "invalid user id")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	n, err := h.node.User(ctx, uid)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "presence unavailable: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, struct {
		UID         string `json:"uid"`
		Online      bool   `json:"online"`
		Connections int    `json:"connections"`
	}{uid, n > 0, n})
}

// serveChannel answers a channel's member count and its first members.
func (h *Hub) serveChannel(w http.ResponseWriter, r *http.Request) {
	channel := r.PathValue("channel")
	limit, ok := queryLimit(w, r)
	if !ok {
		return
	}
	count, members, err := h.node.Members(channel, limit)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Channel string   `json:"channel"`
		Count   int      `json:"count"`
		Members []string `json:"members"`
	}{channel, count, members})
}

func (h *Hub) serveHeartbeat(w http.ResponseWriter, r *http.Request) {
	uid, channels, ok := h.identify(w, r)
	if !ok {
		return
	}
	if err := h.heartbeat(uid, channels); err != nil {
		writeError(w, http.StatusServiceUnavailable, "shutting down")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Hub) serveRing(w http.ResponseWriter, r *http.Request) {
	ring := h.tracker.Ring()
	writeJSON(w, http.StatusOK, struct {
		Slots  int   `json:"slots"`
		TickMS int64 `json:"tick_ms"`
		Cursor int   `json:"cursor"`
		Due    []int `json:"due"`
	}{ring.Slots, ring.Tick.Milliseconds(), ring.Cursor, ring.Due})
}

// serveHealth answers 200 {"status":"ok"} while the engine is healthy, and
// 503 with the engine's error, or while shutting down, so a load balancer
// stops sending clients here.
func (h *Hub) serveHealth(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	closing := h.closing
	h.mu.Unlock()
	if closing {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting down"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	if err := h.node.Engine().Health(ctx); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
