package transport

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/presenced/presenced/internal/shrink"
	"github.com/presenced/presenced/protocol"
)

// apiTimeout bounds an engine query made for one HTTP request.
const apiTimeout = 5 * time.Second

// maxAPIBody bounds the JSON body of a POST of the server API.
const maxAPIBody = 64 << 10

// routes builds the Hub's muxes: one per group of endpoints, and one with
// them all.
func (h *Hub) routes() {
	api := map[string]http.HandlerFunc{
		"POST /api/heartbeat": h.serveHeartbeat,
		"GET /api/ring":       h.serveRing,
		// The server API: presence is not public when users sign in.
		"GET /api/presence":           h.serverAPI(h.servePresence),
		"GET /api/presence/{uid}":     h.serverAPI(h.serveUser),
		"GET /api/channels/{channel}": h.serverAPI(h.serveChannel),
		"GET /api/events":             h.serverAPI(h.serveEvents),
		"POST /api/publish":           h.serverAPI(h.servePublish),
		"POST /api/send":              h.serverAPI(h.serveSend),
		"POST /api/disconnect":        h.serverAPI(h.serveDisconnect),
	}
	// A page on an allowed origin may call any of them: the key, not the
	// origin, is what guards the server API, and a page holding one gains
	// nothing over curl; refusing its preflight would only break it.
	api = h.withPreflight(api)
	health := map[string]http.HandlerFunc{
		"GET /healthz": h.serveHealth,
		"GET /readyz":  h.serveReady,
	}
	// A page on an allowed origin may open a stream and POST to it, as it
	// may open a WebSocket: the origin rules are /ws's, with CORS headers
	// so that the page can read the answers (EventSource needs them).
	sse := h.withPreflight(map[string]http.HandlerFunc{
		"GET /sse":            h.serveSSE,
		"POST /sse/{session}": h.serveSSEPost,
	})
	h.mux, h.api, h.health, h.sse = http.NewServeMux(), http.NewServeMux(), http.NewServeMux(), http.NewServeMux()
	h.mux.HandleFunc("GET /ws", h.ServeWS)
	for pattern, f := range sse {
		h.mux.HandleFunc(pattern, f)
		h.sse.HandleFunc(pattern, f)
	}
	for pattern, f := range api {
		h.mux.HandleFunc(pattern, f)
		h.api.HandleFunc(pattern, f)
	}
	for pattern, f := range health {
		h.mux.HandleFunc(pattern, f)
		h.health.HandleFunc(pattern, f)
	}
}

// ServeHTTP serves GET /ws, Server-Sent Events at /sse and /sse/{session},
// the HTTP API under /api/, GET /healthz and GET /readyz. Mount it for
// "/ws", "/sse", "/sse/", "/api/", "/healthz" and "/readyz" in a larger
// mux, or mount ServeWS, SSEHandler, APIHandler and HealthHandler one by
// one.
// Unknown paths and methods get 404 and 405 with a JSON body, like every
// other refusal. Pages on the allowed origins may call the API (CORS, with
// preflights); see CORS for /presenced.js.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a := accessPublic
	if _, pattern := h.health.Handler(r); pattern != "" {
		a = accessHealth
	}
	if !h.allowed(w, r, a) {
		return
	}
	var cors *originPolicy
	if strings.HasPrefix(r.URL.Path, "/api/") || isSSEPath(r.URL.Path) {
		cors = h.origins
	}
	serveJSONMux(h.mux, cors, w, r)
}

// isSSEPath reports whether path is /sse or under it.
func isSSEPath(path string) bool { return path == "/sse" || strings.HasPrefix(path, "/sse/") }

// SSEHandler serves Server-Sent Events alone: GET /sse opens a stream of
// the frames a WebSocket would get, POST /sse/{session} carries its
// client's frames, and OPTIONS on both answers CORS preflights from the
// allowed origins. Mount it for "/sse" and "/sse/"; ServeHTTP serves it too.
func (h *Hub) SSEHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.allowed(w, r, accessPublic) {
			serveJSONMux(h.sse, h.origins, w, r)
		}
	})
}

// APIHandler serves the HTTP API alone: POST /api/heartbeat, GET /api/ring
// and the server API (GET /api/presence, /api/presence/{uid},
// /api/channels/{channel}, POST /api/publish, /api/send,
// /api/disconnect), with OPTIONS on each for CORS preflights from the
// allowed origins. Mount it for "/api/".
func (h *Hub) APIHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.allowed(w, r, accessPublic) {
			serveJSONMux(h.api, h.origins, w, r)
		}
	})
}

// HealthHandler serves the health checks alone: GET /healthz (liveness) and
// GET /readyz (readiness). Mount it for "/healthz" and "/readyz".
func (h *Hub) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serveJSONMux(h.health, nil, w, r) })
}

// serveJSONMux serves r from mux, answering its own refusals (404, or 405
// with Allow) in JSON with the same status and headers, and with the CORS
// headers of cors when it is not nil, so a page can read why.
func serveJSONMux(mux *http.ServeMux, cors *originPolicy, w http.ResponseWriter, r *http.Request) {
	handler, pattern := mux.Handler(r)
	if pattern == "" {
		if cors != nil {
			cors.crossOrigin(w.Header(), r)
		}
		rec := &statusRecorder{header: http.Header{}}
		handler.ServeHTTP(rec, r)
		if allow := rec.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		writeError(w, rec.status, strings.ToLower(http.StatusText(rec.status)))
		return
	}
	mux.ServeHTTP(w, r)
}

// statusRecorder keeps the status and headers of a response, not its body.
type statusRecorder struct {
	header http.Header
	status int
}

func (s *statusRecorder) Header() http.Header         { return s.header }
func (s *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (s *statusRecorder) WriteHeader(code int)        { s.status = code }

// serverAPI guards an endpoint of the server API, inside its CORS
// headers, so a page can read a refusal: see access.
func (h *Hub) serverAPI(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.allowed(w, r, accessKey) {
			next(w, r)
		}
	}
}

// keyed reports whether r presents the Hub's API key; false when it has
// none.
func (h *Hub) keyed(r *http.Request) bool {
	if h.apiKey == "" {
		return false
	}
	scheme, key, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	return strings.EqualFold(scheme, "apikey") &&
		subtle.ConstantTimeCompare([]byte(strings.TrimSpace(key)), []byte(h.apiKey)) == 1
}

// apiMessage is the body of POST /api/publish and /api/send.
type apiMessage struct {
	Channel string          `json:"channel"`
	UID     string          `json:"uid"`
	Data    json.RawMessage `json:"data"`
}

// errTrailing is a body with more after its JSON object.
var errTrailing = errors.New("trailing data")

// readMessage reads an apiMessage, answering 400 itself when it is not one,
// and 413 when the body is over maxAPIBody.
func readMessage(w http.ResponseWriter, r *http.Request) (apiMessage, bool) {
	var m apiMessage
	if !readBody(w, r, &m) {
		return m, false
	}
	if len(m.Data) == 0 || string(m.Data) == "null" {
		writeError(w, http.StatusBadRequest, `missing "data"`)
		return m, false
	}
	return m, true
}

// readBody reads the JSON object of a server API call into v, answering
// 400 itself when it is not one, and 413 when it is over maxAPIBody.
func readBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAPIBody))
	err := dec.Decode(v)
	var tooBig *http.MaxBytesError
	if err == nil {
		if _, err = dec.Token(); err == io.EOF {
			err = nil
		} else if !errors.As(err, &tooBig) {
			err = errTrailing
		}
	}
	switch {
	case errors.As(err, &tooBig):
		// Too big is not malformed: the client must send less, not fix it.
		writeError(w, http.StatusRequestEntityTooLarge, "the body is over 64 KiB")
		return false
	case errors.Is(err, errTrailing):
		writeError(w, http.StatusBadRequest, "the body must be one JSON object, with nothing after it")
		return false
	case err != nil:
		writeError(w, http.StatusBadRequest, "the body must be a JSON object: "+protocol.JSONError(err).Error())
		return false
	}
	return true
}

func (h *Hub) servePublish(w http.ResponseWriter, r *http.Request) {
	m, ok := readMessage(w, r)
	if !ok {
		return
	}
	if !protocol.ValidChannel(m.Channel) {
		writeError(w, http.StatusBadRequest, protocol.ErrInvalidChannel.Error())
		return
	}
	h.answer(w, h.Publish(r.Context(), m.Channel, m.Data))
}

func (h *Hub) serveSend(w http.ResponseWriter, r *http.Request) {
	m, ok := readMessage(w, r)
	if !ok {
		return
	}
	if !protocol.ValidUID(m.UID) {
		writeError(w, http.StatusBadRequest, `"uid" must be a user ID: 1 to 64 letters, digits or _.-@`)
		return
	}
	h.answer(w, h.Send(r.Context(), m.UID, m.Data))
}

// answer ends a server API call: 204, or 503 when the engine failed.
func (h *Hub) answer(w http.ResponseWriter, err error) {
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "not delivered: "+err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// identify applies the origin and identity rules shared by /ws and
// /api/heartbeat, and reads ?channels=, writing the error response (403,
// 401, 400 or 503) itself.
func (h *Hub) identify(w http.ResponseWriter, r *http.Request) (Session, []string, bool) {
	if !h.origins.allow(r) {
		writeError(w, http.StatusForbidden, "origin not allowed")
		return Session{}, nil, false
	}
	sess, err := session(h.auth, r)
	if err == nil && !protocol.ValidUID(sess.UID) {
		err = ErrInvalidUID
	}
	if err == nil && sess.Info == nil && h.userInfo != nil && !h.demo {
		sess.Info, err = h.lookUpInfo(r.Context(), sess.UID)
	}
	if err != nil {
		h.log.Debug("transport: refused", "remote", r.RemoteAddr, "err", err)
		writeError(w, authStatus(err), err.Error())
		return Session{}, nil, false
	}
	var channels []string
	if list := r.URL.Query().Get("channels"); list != "" {
		if channels, err = h.node.CheckChannels(strings.Split(list, ",")); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return Session{}, nil, false
		}
	}
	h.mu.Lock()
	closing := h.closing
	h.mu.Unlock()
	if closing {
		writeError(w, http.StatusServiceUnavailable, "shutting down")
		return Session{}, nil, false
	}
	return sess, channels, true
}

// ServeWS upgrades r to a WebSocket for the user the Authenticator names and
// serves it until it closes. Use it to mount the socket at a path of your
// own; ServeHTTP mounts it at /ws.
func (h *Hub) ServeWS(w http.ResponseWriter, r *http.Request) {
	if !h.allowed(w, r, accessPublic) {
		return
	}
	// A plain GET with no identity (a browser's address bar, curl) is told
	// to upgrade; one that names a user has its identity checked first, so
	// a bad token is 401 whether or not the request upgrades.
	upgrade := websocket.IsWebSocketUpgrade(r)
	if !upgrade && !namesUser(r) {
		h.needUpgrade(w)
		return
	}
	sess, channels, ok := h.identify(w, r)
	if !ok {
		return
	}
	if !upgrade {
		h.needUpgrade(w)
		return
	}
	c, sess, channels, ok := h.newConn(w, sess, channels)
	if !ok {
		return
	}
	// The handshake's framer is c's, with one user (the handshake) until
	// the welcome is queued.
	f := &framer{c: c, users: 1}
	ws, err := h.upgrader.Upgrade(hijacker{w, f}, r, nil)
	if err != nil {
		h.mu.Lock()
		h.dropLocked(c)
		h.mu.Unlock()
		return // the upgrader has answered with an HTTP error
	}
	f.ws = ws
	h.setUp(f)
	c.fr = f
	if sb, ok := c.w.Conn.(interface{ SetWriteBuffer(int) error }); ok && h.socketBuffer > 0 {
		if err := sb.SetWriteBuffer(h.socketBuffer); err != nil {
			h.log.Debug("transport: set socket send buffer", "err", err)
		}
	}
	h.mu.Lock()
	if h.refusedClosingLocked(c) {
		h.mu.Unlock()
		goingAway(ws, h.writeTimeout)
		return
	}
	// Polled only now, under the lock Shutdown takes to list connections:
	// Shutdown then either finds c in the poller's table or has us see
	// closing above, never a connection still being set up.
	if h.poller != nil {
		if err := c.poll(); err != nil {
			h.log.Debug("transport: not polled", "uid", c.uid, "err", err)
		}
	}
	if !c.w.polled { // the poller's table has the others
		h.live[c] = struct{}{}
	}
	h.readers.Add(1)
	h.mu.Unlock()
	h.m.connections.Inc()

	c.open(sess, channels, "")
	// The handler returns, so net/http's request, response and buffers are
	// freed: a polled connection keeps no goroutine, any other its reader's.
	if c.w.polled {
		c.giveBack()
		h.workers.run((*readTask)(c)) // for what came, or was woken, meanwhile
		return
	}
	go c.readLoop(ws) // keeps the framer for life
}

// needUpgrade answers a plain GET of the socket's path (a browser's
// address bar, curl) with 426 and what to send instead: the identity check
// would otherwise answer first, about a user ID the caller never meant to
// give.
func (h *Hub) needUpgrade(w http.ResponseWriter) {
	who := "the credentials the server's Authenticator takes"
	switch h.auth.(type) {
	case demoAuth:
		who = "?uid=USER_ID (demo mode)"
	case *jwtAuth:
		who = "a token (Authorization: Bearer TOKEN, or ?token=TOKEN)"
	}
	w.Header().Set("Upgrade", "websocket")
	w.Header().Set("Connection", "Upgrade")
	writeError(w, http.StatusUpgradeRequired, "this is the WebSocket endpoint: send a WebSocket upgrade "+
		"(Connection: Upgrade, Upgrade: websocket, Sec-WebSocket-Version: 13, Sec-WebSocket-Key) with "+who)
}

// namesUser reports whether r carries an identity the built-in
// authenticators read: ?uid=, ?token= or an Authorization header.
func namesUser(r *http.Request) bool {
	q := r.URL.Query()
	return q.Has("uid") || q.Has("token") || r.Header.Get("Authorization") != ""
}

// poll takes c's socket from package net and registers it with the
// poller. It is registered now, before a writer can fail and close it, but
// read only once the handler is done: until then a wake just marks it for
// the worker the handler starts.
func (c *conn) poll() error {
	if _, ok := c.w.Conn.(*net.TCPConn); !ok {
		return fmt.Errorf("transport: %T is not TCP", c.w.Conn)
	}
	if err := c.w.sock.adopt(c, c.w.Conn); err != nil {
		return err
	}
	c.w.state.Store(running)
	if err := c.hub.poller.add(c); err != nil {
		c.w.sock.abandon()
		c.w.state.Store(idle)
		return err
	}
	c.w.Conn.Close()
	c.w.Conn, c.w.polled = nil, true
	return nil
}

// reserve counts a WebSocket of uid about to open, unless this node holds
// MaxConns or uid MaxConnsPerUser already: it says which, or reserved.
func (h *Hub) reserve(uid string) fullness {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.maxConns > 0 && h.conns >= h.maxConns:
		return nodeFull
	case h.perUser[uid] >= h.maxPerUser:
		return userFull
	}
	h.conns++
	h.perUser[uid]++
	return reserved
}

func (h *Hub) releaseLocked(uid string) {
	h.conns--
	if h.perUser[uid]--; h.perUser[uid] <= 0 {
		delete(h.perUser, uid)
		h.perUser = shrink.Map(h.perUser, &h.userPeak)
	}
}

// forget drops a finished connection from the Hub's bookkeeping.
func (h *Hub) forget(c *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.live, c)
	h.live = shrink.Map(h.live, &h.livePeak)
	h.releaseLocked(c.uid)
}

func goingAway(ws *websocket.Conn, timeout time.Duration) {
	ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(protocol.CloseGoingAway, protocol.ReasonShutdown), time.Now().Add(timeout))
	ws.Close()
}

// errNotAllowed answers a join the token or the embedder refused.
const errNotAllowed = "not allowed to join this channel"

// queryLimit reads ?limit= of a listing: DefaultPresenceLimit when absent,
// 0 to MaxPresenceLimit. It answers 400 itself when limit is out of range,
// as a page of members does: a clamped answer would hide that fewer came
// than asked.
func queryLimit(w http.ResponseWriter, r *http.Request) (int, bool) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return DefaultPresenceLimit, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > MaxPresenceLimit {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("limit must be a whole number from 0 to %d", MaxPresenceLimit))
		return 0, false
	}
	return n, true
}

// pageQuery reads ?limit= and ?after= of a page of members: limit 1 to
// protocol.MaxPageLimit (absent: protocol.DefaultPageLimit), after a user ID
// or empty. It answers 400 itself when either is invalid.
func pageQuery(w http.ResponseWriter, r *http.Request) (limit int, after string, ok bool) {
	q := r.URL.Query()
	limit = protocol.DefaultPageLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > protocol.MaxPageLimit {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit must be a whole number from 1 to %d", protocol.MaxPageLimit))
			return 0, "", false
		}
		limit = n
	}
	after = q.Get("after")
	if after != "" && !protocol.ValidUID(after) {
		writeError(w, http.StatusBadRequest, "after must be a user ID (1 to 64 letters, digits or _.-@), or empty for the first page")
		return 0, "", false
	}
	return limit, after, true
}

func (h *Hub) serveHeartbeat(w http.ResponseWriter, r *http.Request) {
	sess, channels, ok := h.identify(w, r)
	if !ok {
		return
	}
	for _, ch := range channels {
		if !h.mayJoin(sess, ch) {
			writeError(w, http.StatusForbidden, errNotAllowed+": "+ch)
			return
		}
	}
	if err := h.node.Heartbeat(sess.UID, channels); err != nil {
		writeError(w, http.StatusServiceUnavailable, "shutting down")
		return
	}
	h.m.kaHeartbeat.Inc()
	w.WriteHeader(http.StatusNoContent)
}

func (h *Hub) serveRing(w http.ResponseWriter, r *http.Request) {
	ring := h.node.Ring()
	if status, _ := h.admit(r, accessKey); status != 0 {
		// The due counts count invisible users' connections too; the
		// shape and the cursor tell of nobody, and draw the demo's ring.
		ring.Due = nil
	}
	writeJSON(w, http.StatusOK, struct {
		Slots  int   `json:"slots"`
		TickMS int64 `json:"tick_ms"`
		Cursor int   `json:"cursor"`
		Due    []int `json:"due,omitempty"`
	}{ring.Slots, ring.Tick.Milliseconds(), ring.Cursor, ring.Due})
}

// serveHealth answers 200 while the process serves: liveness.
func (h *Hub) serveHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "protocol": protocol.Version})
}

// serveReady answers 200 {"status":"ok"} while the engine is reachable, and
// 503 with the reason while it is not or while shutting down, so a load
// balancer stops sending clients here: readiness. Anyone may ask, so the
// reason names no address; the log has the whole error.
func (h *Hub) serveReady(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	closing := h.closing
	h.mu.Unlock()
	if closing {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "error": "shutting down"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	if err := h.node.Health(ctx); err != nil {
		h.log.Debug("transport: not ready", "err", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "error": withoutAddresses(err)})
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
