// Package ssetest is a client of presenced's Server-Sent Events for tests
// of other packages and of the binary, directly or through a proxy: it
// reads a stream as a browser's EventSource does and posts frames with
// net/http.
package ssetest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// A Stream is one GET /sse.
type Stream struct {
	Base     string // http://host:port the stream was opened on, where Post goes
	Session  string
	Resp     *http.Response
	Comments chan string // comment lines, dropped when nobody reads

	cancel context.CancelFunc
	events chan string
	done   chan error
}

// Open sends GET base/sse?query and, on 200, reads the welcome. Another
// status is an error with the answer's body.
func Open(base, query string, header http.Header) (*Stream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/sse?"+query, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("GET /sse: %d %s", resp.StatusCode, body)
	}
	s := &Stream{Base: base, Resp: resp, cancel: cancel, Comments: make(chan string, 64),
		events: make(chan string, 1024), done: make(chan error, 1)}
	go s.read()
	w, err := s.Next(10 * time.Second)
	if err != nil {
		s.Close()
		return nil, err
	}
	var welcome struct {
		Type    string `json:"type"`
		Session string `json:"session"`
	}
	if err := json.Unmarshal([]byte(w), &welcome); err != nil || welcome.Type != "welcome" || welcome.Session == "" {
		s.Close()
		return nil, fmt.Errorf("the first event is not a welcome with a session: %s", w)
	}
	s.Session = welcome.Session
	return s, nil
}

func (s *Stream) read() {
	defer close(s.events)
	s.done <- Scan(s.Resp.Body, func(data string) { s.events <- data }, func(line string) {
		select {
		case s.Comments <- line:
		default:
		}
	})
}

// Scan reads a stream's body to its end: event gets each event's data, in
// order, and comment each comment line. It returns nil when the body ends
// between events, and an error on a read that fails or a line the server
// never writes.
func Scan(body io.Reader, event, comment func(string)) error {
	r := bufio.NewReader(body)
	var data []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if data != nil {
				event(strings.Join(data, "\n"))
				data = nil
			}
		case strings.HasPrefix(line, ":"):
			comment(line)
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		default:
			return fmt.Errorf("a line the server never writes: %q", line)
		}
	}
}

// ErrEnded is Next's error once the stream ended.
var ErrEnded = errors.New("ssetest: the stream ended")

// Next returns the next event's data, waiting at most wait.
func (s *Stream) Next(wait time.Duration) (string, error) {
	select {
	case e, ok := <-s.events:
		if !ok {
			return "", ErrEnded
		}
		return e, nil
	case <-time.After(wait):
		return "", errors.New("ssetest: no event")
	}
}

// Until skips events until one equals want, waiting at most wait in all.
func (s *Stream) Until(want string, wait time.Duration) error {
	end := time.Now().Add(wait)
	var seen []string
	for {
		e, err := s.Next(time.Until(end))
		if err != nil {
			return fmt.Errorf("waiting for %s after %q: %w", want, seen, err)
		}
		if e == want {
			return nil
		}
		seen = append(seen, e)
	}
}

// Ended waits at most wait for the stream to end and returns its last
// event.
func (s *Stream) Ended(wait time.Duration) (string, error) {
	last := ""
	timeout := time.After(wait)
	for {
		select {
		case e, ok := <-s.events:
			if !ok {
				return last, <-s.done
			}
			last = e
		case <-timeout:
			return last, errors.New("ssetest: the stream is still open")
		}
	}
}

// Post sends body to the stream's session on base ("": where the stream
// was opened) and returns the answer's status and body.
func (s *Stream) Post(base, body string) (int, string, error) {
	if base == "" {
		base = s.Base
	}
	return Post(base, s.Session, body)
}

// Post sends body to POST base/sse/session as text/plain.
func Post(base, session, body string) (int, string, error) {
	resp, err := http.Post(base+"/sse/"+session, "text/plain", strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Close ends the stream from the client's side.
func (s *Stream) Close() {
	s.cancel()
	s.Resp.Body.Close()
}
