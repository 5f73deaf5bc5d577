package transport

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/presenced/presenced/presence"
)

// A POST for a stream another node holds is forwarded to that node through
// the engine (presence.Forwarder), which answers it as if it had come
// there, so a load balancer needs no sticky sessions: the session names
// the node (newSession), the request goes to it, and the POST waits for its
// answer, the whole of it (404, 413, 429 or 204), up to forwardWait.

// forwardWait bounds how long a forwarded POST waits for the holding
// node's answer: both legs through the engine, within a chat's handover.
const forwardWait = chatHandover

// forwardRequest is a POST forwarded to the node holding its session.
type forwardRequest struct {
	Session string `json:"s"`
	Body    []byte `json:"b"`
}

// forwardPost answers a POST for a session this node does not hold: 404
// when it names no node or this one, else the answer of the node it names.
func (h *Hub) forwardPost(ctx context.Context, id string, body []byte) postAnswer {
	addr, ok := sessionNode(id)
	if !ok || addr == "" || addr == h.node.Address() {
		return postAnswer{http.StatusNotFound, errNoSession.Error()}
	}
	req, err := json.Marshal(forwardRequest{Session: id, Body: body})
	if err != nil {
		return postAnswer{http.StatusInternalServerError, "encoding the request for the node holding the session: " + err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, forwardWait)
	defer cancel()
	raw, err := h.node.Forward(ctx, addr, req)
	if errors.Is(err, presence.ErrNoForwarder) || errors.Is(err, presence.ErrNoNode) {
		// No node listens where the session says: it ended with its
		// node, or never was.
		return postAnswer{http.StatusNotFound, errNoSession.Error()}
	}
	if err != nil {
		return postAnswer{http.StatusServiceUnavailable, "not delivered to the node holding the session (it may be gone): " + err.Error()}
	}
	var a postAnswer
	if err := json.Unmarshal(raw, &a); err != nil || a.Status < 200 || a.Status > 599 {
		return postAnswer{http.StatusBadGateway, "the node holding the session answered what is not an answer"}
	}
	return a
}

// forwarded takes a POST another node forwarded here and answers it.
func (h *Hub) forwarded(m presence.Message) {
	if m.Kind != presence.MessageForward {
		return
	}
	var req forwardRequest
	a := postAnswer{http.StatusNotFound, errNoSession.Error()}
	if err := json.Unmarshal(m.Frame.Data, &req); err != nil {
		a = postAnswer{http.StatusBadRequest, "not a forwarded request"}
	} else if c := h.session(req.Session); c != nil {
		a = c.post(req.Body)
	}
	raw, _ := json.Marshal(a) // a struct of an int and a string: never fails
	ctx, cancel := context.WithTimeout(context.Background(), forwardWait)
	defer cancel()
	if err := h.node.Answer(ctx, m, raw); err != nil {
		h.log.Debug("transport: a forwarded POST's answer was not delivered", "err", err)
	}
}
