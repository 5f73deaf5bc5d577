package transport_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/presenced/presenced/internal/ssetest"
	"github.com/stretchr/testify/require"
)

// sseClient reads a stream of Server-Sent Events as a browser's
// EventSource does, and posts its frames with net/http.
type sseClient struct {
	base     string // http://host:port
	session  string
	welcome  map[string]any
	resp     *http.Response
	cancel   context.CancelFunc
	events   chan string // each event's data, in order
	comments chan string
	done     chan error // the stream's end: nil when the server ended it
}

// openSSE opens GET /sse?query on base, which must answer 200, and reads
// the welcome.
func openSSE(t *testing.T, base, query string, header http.Header) *sseClient {
	t.Helper()
	c, status, body := dialSSE(t, base, query, header)
	require.Equal(t, http.StatusOK, status, body)
	w := c.next(t)
	require.NoError(t, json.Unmarshal([]byte(w), &c.welcome), w)
	require.Equal(t, "welcome", c.welcome["type"], w)
	c.session, _ = c.welcome["session"].(string)
	require.NotEmpty(t, c.session, w)
	return c
}

// dialSSE sends GET /sse?query; on 200 it returns the stream, else the
// status and the error body.
func dialSSE(t *testing.T, base, query string, header http.Header) (*sseClient, int, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/sse?"+query, nil)
	require.NoError(t, err)
	for k, vs := range header {
		req.Header[k] = vs
	}
	if host := header.Get("Host"); host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, resp.StatusCode, string(body)
	}
	c := &sseClient{base: base, resp: resp, cancel: cancel, events: make(chan string, 1024),
		comments: make(chan string, 1024), done: make(chan error, 1)}
	t.Cleanup(c.close)
	go c.read()
	return c, resp.StatusCode, ""
}

func (c *sseClient) read() {
	defer close(c.events)
	c.done <- ssetest.Scan(c.resp.Body, func(data string) { c.events <- data }, func(line string) {
		select {
		case c.comments <- line:
		default:
		}
	})
}

func (c *sseClient) close() {
	c.cancel()
	c.resp.Body.Close()
}

// next returns the next event's data.
func (c *sseClient) next(t *testing.T) string {
	t.Helper()
	select {
	case e, ok := <-c.events:
		if !ok {
			require.FailNow(t, "stream ended", "%v", <-c.done)
		}
		return withoutLastSeen(e)
	case <-time.After(waitLong):
		require.FailNow(t, "no event")
		return ""
	}
}

// until skips events until one equals want.
func (c *sseClient) until(t *testing.T, want string) {
	t.Helper()
	for c.next(t) != want {
	}
}

// ended waits for the stream to end and returns its last event.
func (c *sseClient) ended(t *testing.T) string {
	t.Helper()
	last := ""
	timeout := time.After(waitLong)
	for {
		select {
		case e, ok := <-c.events:
			if !ok {
				require.NoError(t, <-c.done)
				return last
			}
			last = e
		case <-timeout:
			require.FailNow(t, "stream still open")
		}
	}
}

// post sends body to the stream's session and returns the status and body
// of the answer.
func (c *sseClient) post(t *testing.T, body string) (int, string) {
	t.Helper()
	return postSSE(t, c.base, c.session, body)
}

func postSSE(t *testing.T, base, session, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(base+"/sse/"+session, "text/plain", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// sync posts a ping and waits for its pong: every frame posted before it
// is handled.
func (c *sseClient) sync(t *testing.T) {
	t.Helper()
	status, body := c.post(t, `{"type":"ping"}`)
	require.Equal(t, http.StatusNoContent, status, body)
	c.until(t, `{"type":"pong"}`)
}
