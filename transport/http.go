package transport

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
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
	mux.HandleFunc("POST /api/heartbeat", h.serveHeartbeat)
	mux.HandleFunc("GET /api/ring", h.serveRing)
	mux.HandleFunc("GET /healthz", h.serveHealth)
	h.mux = mux
}

// ServeHTTP serves GET /ws, GET /api/presence, GET /api/presence/{uid},
// POST /api/heartbeat, GET /api/ring and GET /healthz; other paths get 404.
// Mount it for "/ws", "/api/" and "/healthz" in a larger mux.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// identify applies the origin and identity rules shared by /ws and
// /api/heartbeat, writing the error response (403, 401, 400 or 503) itself.
func (h *Hub) identify(w http.ResponseWriter, r *http.Request) (string, bool) {
	if !h.origins.allow(r) {
		writeError(w, http.StatusForbidden, "origin not allowed")
		return "", false
	}
	uid, err := h.auth.Authenticate(r)
	if err == nil && !ValidUID(uid) {
		err = ErrInvalidUID
	}
	if err != nil {
		h.log.Debug("transport: refused", "remote", r.RemoteAddr, "err", err)
		writeError(w, authStatus(err), err.Error())
		return "", false
	}
	h.mu.Lock()
	closing := h.closing
	h.mu.Unlock()
	if closing {
		writeError(w, http.StatusServiceUnavailable, "shutting down")
		return "", false
	}
	return uid, true
}

// ServeWS upgrades r to a WebSocket for the user the Authenticator names and
// serves it until it closes. Use it to mount the socket at a path of your
// own; ServeHTTP mounts it at /ws.
func (h *Hub) ServeWS(w http.ResponseWriter, r *http.Request) {
	uid, ok := h.identify(w, r)
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
	c := &conn{hub: h, uid: uid, kind: kindWS, ws: ws}
	ws.SetPingHandler(c.pingHandler)
	ws.SetPongHandler(c.pongHandler)

	h.mu.Lock()
	if h.closing {
		h.mu.Unlock()
		ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "server shutdown"), time.Now().Add(h.writeTimeout))
		ws.Close()
		return
	}
	h.live[c] = struct{}{}
	h.readers.Add(1)
	h.addLocked(c)
	h.mu.Unlock()
	h.m.connections.Inc()
	h.bmu.Lock()
	h.conns[c] = struct{}{}
	h.bmu.Unlock()
	c.touch()

	// Registered for broadcasts before the snapshot, so no presence change
	// falls between the two; the writer holds them back until the welcome.
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	_, online, err := h.engine.Users(ctx, h.welcomeLimit)
	cancel()
	if err != nil {
		h.log.Warn("transport: welcome: list users", "err", err)
		online = nil
	}
	c.sendWelcome(mustJSON(welcomeFrame{
		Type:      "welcome",
		UID:       uid,
		TimeoutMS: h.Timeout().Milliseconds(),
		Online:    withUID(online, uid, h.welcomeLimit),
	}))
	// A goroutine of its own, so the handler returns and net/http's request,
	// response and buffers are freed: an idle connection keeps only its
	// reader's small stack.
	go c.readLoop()
}

// withUID returns the first limit IDs of sorted ∪ {uid}, in order: the
// engine may not list a user whose first connection it has not seen yet.
func withUID(sorted []string, uid string, limit int) []string {
	i, found := slices.BinarySearch(sorted, uid)
	if !found {
		sorted = slices.Insert(slices.Clip(sorted), i, uid)
	}
	if len(sorted) > limit {
		sorted = sorted[:limit]
	}
	return sorted
}

func (h *Hub) servePresence(w http.ResponseWriter, r *http.Request) {
	limit := DefaultPresenceLimit
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "limit must be a non-negative integer")
			return
		}
		limit = min(n, MaxPresenceLimit)
	}
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	count, users, err := h.engine.Users(ctx, limit)
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
	n, err := h.engine.Lookup(ctx, uid)
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

func (h *Hub) serveHeartbeat(w http.ResponseWriter, r *http.Request) {
	uid, ok := h.identify(w, r)
	if !ok {
		return
	}
	if err := h.heartbeat(uid); err != nil {
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
	if err := h.engine.Health(ctx); err != nil {
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
