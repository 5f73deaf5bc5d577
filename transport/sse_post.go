package transport

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// A stream's input: POST /sse/{session} carries client frames, one or
// several separated by newlines, into the stream's inbox, through the
// limits a WebSocket's frames pass. The answer says what became of them:
//
//	204  every frame is queued (handled in its turn, answered on the stream)
//	404  no live session of that name, on any node
//	413  a frame over MaxMessage (a watch frame may be larger, as on /ws);
//	     nothing of the body is queued
//	429  a frame over the frame or byte rate: the frames before it are
//	     queued, it and those after it dropped
//
// Any frame is a keepalive, as on a WebSocket; nothing else is.

// postAnswer is how a POST went: its status, and the error when it failed.
type postAnswer struct {
	Status int    `json:"status"`
	Error  string `json:"error,omitempty"`
}

// bodyLimit bounds a POST's body: the byte rate's burst, more than which
// no body could pass, and room for one frame of the largest size.
func (h *Hub) bodyLimit() int64 { return max(int64(h.limits.byteBurst), h.readLimit()) }

// serveSSEPost takes a POST of client frames for a stream, held here or
// by another node.
func (h *Hub) serveSSEPost(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("session")
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.bodyLimit()))
	if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes", h.bodyLimit()))
		return
	} else if err != nil {
		writeError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	var a postAnswer
	if c := h.session(id); c != nil {
		a = c.post(body)
	} else {
		a = h.forwardPost(r.Context(), id, body)
	}
	if a.Status == http.StatusNoContent {
		w.WriteHeader(a.Status)
		return
	}
	writeError(w, a.Status, a.Error)
}

// splitFrames returns the frames of a POST's body: its lines, each without
// a trailing CR; blank lines are none.
func splitFrames(body []byte) [][]byte {
	var frames [][]byte
	for len(body) > 0 {
		line, rest, _ := bytes.Cut(body, []byte("\n"))
		body = rest
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(bytes.TrimSpace(line)) > 0 {
			frames = append(frames, line)
		}
	}
	return frames
}

// post hands the frames of body to c's inbox, as its reader would, and says
// how it went.
func (c *conn) post(body []byte) postAnswer {
	h := c.hub
	frames := splitFrames(body)
	if len(frames) == 0 {
		return postAnswer{http.StatusBadRequest, "the body holds no frame: send one client frame, or several separated by newlines"}
	}
	for _, f := range frames {
		if int64(len(f)) > h.maxMessage && (int64(len(f)) > h.readLimit() || !watchFrame(f)) {
			return postAnswer{http.StatusRequestEntityTooLarge,
				fmt.Sprintf("a frame is over %d bytes (-max-message); nothing of this body was queued", h.maxMessage)}
		}
	}
	s := c.sse
	s.in.Lock()
	defer s.in.Unlock()
	for i, f := range frames {
		if c.stopped.Load() {
			return postAnswer{http.StatusNotFound, errNoSession.Error()}
		}
		c.touch()
		c.silenced.Store(false)
		h.m.kaText.Inc()
		tap(true, f)
		if !c.admit(len(f)) {
			return postAnswer{http.StatusTooManyRequests,
				fmt.Sprintf("too many messages: slow down; %d of the %d frames were queued, the rest dropped", i, len(frames))}
		}
		c.text(f)
	}
	return postAnswer{Status: http.StatusNoContent}
}
