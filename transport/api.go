package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
)

// The server API's listings. With the API key a caller is the server side
// and sees every user as it is, invisible ones too; without one (demo mode
// only) it is anyone, and sees what a client sees.

// lookUpInfo asks Config.UserInfo for uid's info and checks it.
func (h *Hub) lookUpInfo(ctx context.Context, uid string) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	info, err := h.userInfo(ctx, uid)
	if err != nil {
		return nil, fmt.Errorf("%w: user info: %w", ErrUnauthenticated, err)
	}
	if info == nil {
		return nil, nil
	}
	if info, err = protocol.CheckInfo(info); err != nil {
		return nil, fmt.Errorf("%w: user info: %w", ErrUnauthenticated, err)
	}
	return info, nil
}

// trusted reports whether the API's caller presented the API key.
func (h *Hub) trusted() bool { return h.apiKey != "" }

func (h *Hub) servePresence(w http.ResponseWriter, r *http.Request) {
	limit, ok := queryLimit(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	// The server side reads where the log of edges stood (cursor), so
	// that it can read on from there; a keyless caller sees neither.
	var count int
	var list []string
	var cursor string
	var err error
	if h.trusted() {
		count, list, cursor, err = h.node.UsersAt(ctx, limit)
	} else {
		count, list, err = h.node.VisibleUsers(ctx, limit)
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "presence unavailable: "+err.Error())
		return
	}
	if list == nil {
		list = []string{}
	}
	writeJSON(w, http.StatusOK, struct {
		Count  int      `json:"count"`
		Users  []string `json:"users"`
		Cursor string   `json:"cursor,omitempty"`
	}{count, list, cursor})
}

func (h *Hub) serveUser(w http.ResponseWriter, r *http.Request) {
	uid := r.PathValue("uid")
	if !protocol.ValidUID(uid) {
		writeError(w, http.StatusBadRequest, "invalid user id")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	status := h.node.Status
	if !h.trusted() {
		status = h.node.VisibleStatus
	}
	st, err := status(ctx, uid)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "presence unavailable: "+err.Error())
		return
	}
	answer := struct {
		UID         string          `json:"uid"`
		Online      bool            `json:"online"`
		Connections int             `json:"connections"`
		State       string          `json:"state"`
		LastSeen    int64           `json:"last_seen,omitempty"`
		Info        json.RawMessage `json:"info,omitempty"`
		Mode        string          `json:"mode,omitempty"`
		Note        *protocol.Note  `json:"note,omitempty"`
	}{UID: uid, Online: st.Conns > 0, Connections: st.Conns, State: "active", Info: st.Record.Info, Mode: st.Record.Mode, Note: st.Record.Note}
	switch {
	case st.Conns == 0:
		answer.State = "offline"
		if !st.LastSeen.IsZero() {
			answer.LastSeen = st.LastSeen.UnixMilli()
		}
	case st.Away:
		answer.State = "away"
	}
	writeJSON(w, http.StatusOK, answer)
}

// serveChannel answers a page of a channel's members: its count, up to
// ?limit= members after ?after= in order, the next page's after, and with
// ?records=1 the records of the page's members.
func (h *Hub) serveChannel(w http.ResponseWriter, r *http.Request) {
	channel := r.PathValue("channel")
	limit, after, ok := pageQuery(w, r)
	if !ok {
		return
	}
	if !protocol.ValidChannel(channel) {
		writeError(w, http.StatusBadRequest, protocol.ErrInvalidChannel.Error())
		return
	}
	var records bool
	switch r.URL.Query().Get("records") {
	case "", "0":
	case "1":
		records = true
	default:
		writeError(w, http.StatusBadRequest, "records must be 1 (with records) or 0")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	var count int
	var list []string
	var next, cursor string
	var err error
	if h.trusted() {
		count, list, next, cursor, err = h.node.MembersAt(ctx, channel, after, limit)
	} else {
		count, list, next, err = h.node.VisibleMembers(ctx, channel, after, limit)
	}
	var users map[string]protocol.Record
	if err == nil && records && len(list) > 0 {
		users, err = h.records(ctx, list)
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "presence unavailable: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Channel string                     `json:"channel"`
		Count   int                        `json:"count"`
		Members []string                   `json:"members"`
		Users   map[string]protocol.Record `json:"users,omitempty"`
		Next    string                     `json:"next,omitempty"`
		Cursor  string                     `json:"cursor,omitempty"`
	}{channel, count, list, users, next, cursor})
}

// records returns the records of uids as the caller may see them.
func (h *Hub) records(ctx context.Context, uids []string) (map[string]protocol.Record, error) {
	recs, err := h.node.Records(ctx, uids)
	if err != nil || h.trusted() {
		return recs, err
	}
	for uid, r := range recs {
		// Those asked of are members listed, so seen online.
		if r = presence.See("", uid, presence.UserStatus{Conns: 1, Record: r}).Record; r.IsZero() {
			delete(recs, uid)
		} else {
			recs[uid] = r
		}
	}
	return recs, nil
}

// MaxDisconnectReason bounds the reason of POST /api/disconnect, in bytes:
// what a close frame can carry, should it ever be sent to the clients.
const MaxDisconnectReason = 123

// serveDisconnect closes every connection of a user, on every node, with
// 4403. The reason is the caller's, for this node's log: the clients get
// "disconnected", the reason they know.
func (h *Hub) serveDisconnect(w http.ResponseWriter, r *http.Request) {
	var body struct {
		UID    string `json:"uid"`
		Reason string `json:"reason"`
	}
	if !readBody(w, r, &body) {
		return
	}
	if !protocol.ValidUID(body.UID) {
		writeError(w, http.StatusBadRequest, `"uid" must be a user ID: 1 to 64 letters, digits or _.-@`)
		return
	}
	if len(body.Reason) > MaxDisconnectReason {
		writeError(w, http.StatusBadRequest, fmt.Sprintf(`"reason" is over %d bytes`, MaxDisconnectReason))
		return
	}
	err := h.Disconnect(r.Context(), body.UID)
	if err == nil {
		h.log.Info("transport: disconnected a user at the server API's request", "uid", body.UID, "reason", body.Reason, "remote", r.RemoteAddr)
	}
	h.answer(w, err)
}
