package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/presenced/presenced/protocol"
)

// A Server-Sent Events client is a GET of the stream, read by one
// goroutine for as long as it lasts, and a POST of {"type":"ping"} to
// URL/{session} every spec.Every, each waited for, from a goroutine of its
// own. Every client has its own http.Transport, which holds two
// connections: the stream's, always busy, and one kept alive between POSTs.
// That is what a browser holds per page. A Transport shared by all clients
// would pass every POST over whichever connection is idle, so the server
// would hold a few POST connections in all, as many as are in flight at
// once, instead of one per client, and its memory per client would be
// understated.

// slowAfter is how late a stream's ping may go out, and how long its POST
// may take, before it is counted late or slow: half the slack a ping a
// second has under a 2 s timeout.
const slowAfter = 500 * time.Millisecond

// sseLink is a stream client's HTTP side.
type sseLink struct {
	tr     *http.Transport
	hc     *http.Client
	cancel context.CancelFunc // ends the stream's request
}

// close hangs up the stream and its POSTs' idle connection.
func (l *sseLink) close() {
	l.cancel()
	l.tr.CloseIdleConnections()
}

// sseDialers returns one net.Dialer per source address.
func (w *worker) sseDialers() []*net.Dialer {
	as := w.sourceAddrs()
	ds := make([]*net.Dialer, len(as))
	for i, a := range as {
		ds[i] = &net.Dialer{Timeout: dialTimeout, LocalAddr: a}
	}
	return ds
}

// newSSELink makes a client's Transport: HTTP/1.1, no proxy, one idle
// connection kept for the POSTs beside the stream's, small buffers (the
// frames are tiny).
func newSSELink(d *net.Dialer, cancel context.CancelFunc) *sseLink {
	tr := &http.Transport{
		DialContext:           d.DialContext,
		MaxIdleConnsPerHost:   1,
		MaxConnsPerHost:       2,
		ResponseHeaderTimeout: dialTimeout,
		DisableCompression:    true,
		ReadBufferSize:        1024,
		WriteBufferSize:       512,
	}
	return &sseLink{tr: tr, hc: &http.Client{Transport: tr}, cancel: cancel}
}

// dialSSE opens the stream of client g and starts its reader, which starts
// its pings once the welcome names the session.
func (w *worker) dialSSE(ctx context.Context, d *net.Dialer, g int, readers *sync.WaitGroup) {
	atomic.AddInt64(&w.c.Dialed, 1)
	u, err := w.clientURL(g)
	if err != nil {
		atomic.AddInt64(&w.c.FailedDials, 1)
		return
	}
	// The stream outlives ctx, as a WebSocket does, until closeAll; only
	// its opening is bound to ctx.
	sctx, cancel := context.WithCancel(context.Background())
	link := newSSELink(d, cancel)
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, u, nil)
	if err != nil {
		link.close()
		atomic.AddInt64(&w.c.FailedDials, 1)
		return
	}
	req.Header.Set("Accept", "text/event-stream")
	stop := context.AfterFunc(ctx, cancel)
	resp, err := link.hc.Do(req)
	stop()
	if err == nil && resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		_ = resp.Body.Close()
		err = fmt.Errorf("GET %s: %s: %s", req.URL.Path, resp.Status, strings.TrimSpace(string(body)))
	}
	if err != nil {
		link.close()
		w.dialFailed(g, err)
		return
	}
	now := time.Now()
	c := &client{sse: link, nextPing: now.Add(w.spec.Every).UnixNano()}
	c.lastSent.Store(now.UnixNano())
	w.opened(c)
	readers.Add(1)
	go func() {
		defer readers.Done()
		w.readSSE(ctx, c, resp.Body, readers)
	}()
}

// readSSE reads c's events until the stream ends, a close event included,
// and classifies the end as read does a WebSocket's.
func (w *worker) readSSE(ctx context.Context, c *client, body io.ReadCloser, readers *sync.WaitGroup) {
	defer c.sse.close()
	defer body.Close()
	r := bufio.NewReaderSize(body, 512)
	var data, long bytes.Buffer
	first := true
	closeCode := -1
	var err error
	for closeCode < 0 {
		var line []byte
		if line, err = readLine(r, &long); err != nil {
			break
		}
		if len(line) > 0 {
			if field, value, _ := bytes.Cut(line, []byte(":")); string(field) == "data" {
				if data.Len() > 0 {
					data.WriteByte('\n')
				}
				data.Write(bytes.TrimPrefix(value, []byte(" ")))
			}
			continue // a comment (":...") or a field this client has no use for
		}
		if data.Len() == 0 {
			continue
		}
		msg := data.Bytes()
		kind, ok := frameType(msg)
		if !ok {
			kind = typeInvalid
		}
		w.count(c, kind)
		switch {
		case first && kind == "welcome":
			if session := w.sseWelcome(msg); session != "" {
				readers.Add(1)
				go func() {
					defer readers.Done()
					w.ssePings(ctx, c, strings.TrimSuffix(w.spec.URL, "/")+"/"+session)
				}()
			}
		case kind == "close":
			closeCode = closeEventCode(msg)
		}
		first = false
		data.Reset()
		if data.Cap() > 64<<10 {
			data = bytes.Buffer{}
		}
	}
	w.ended(c, time.Now(), closeCode, err)
}

// sseWelcome records the welcome's timeout and returns its session.
func (w *worker) sseWelcome(msg []byte) string {
	w.welcome(msg)
	f, err := protocol.ParseServer(msg)
	if m, ok := f.(*protocol.Welcome); err == nil && ok {
		return m.Session
	}
	return ""
}

// closeEventCode is the code of a close event, 0 when it has none.
func closeEventCode(msg []byte) int {
	f, err := protocol.ParseServer(msg)
	if m, ok := f.(*protocol.Close); err == nil && ok {
		return m.Code
	}
	return 0
}

// readLine returns the next line of r without its line break; a line longer
// than r's buffer is gathered in long.
func readLine(r *bufio.Reader, long *bytes.Buffer) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		long.Reset()
		long.Write(line)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = r.ReadSlice('\n')
			long.Write(line)
		}
		line = long.Bytes()
		if long.Cap() > 64<<10 {
			*long = bytes.Buffer{}
		}
	}
	if err != nil {
		return nil, err
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), nil
}

// ssePings POSTs c's pings to post on c's schedule, until ctx ends, c goes
// silent or its stream ends. A ping that falls behind is sent at once, as
// appPings does. A ping's time is when its request was written, as a
// WebSocket's is when its frame was.
func (w *worker) ssePings(ctx context.Context, c *client, post string) {
	if w.spec.Every <= 0 {
		return
	}
	pctx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { c.lastSent.Store(time.Now().UnixNano()) },
	})
	t := time.NewTimer(time.Until(time.Unix(0, c.nextPing)))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if c.silent.Load() || c.closed.Load() {
			return
		}
		if late := time.Since(time.Unix(0, c.nextPing)); late > slowAfter {
			atomic.AddInt64(&w.c.LatePings, 1)
		}
		c.nextPing += int64(w.spec.Every)
		if err := w.postPing(pctx, c.sse.hc, post); err != nil && ctx.Err() == nil && !c.closed.Load() {
			if n := atomic.AddInt64(&w.c.Errors, 1); n <= 5 {
				w.log.Warn("ping failed", "err", err)
			}
		}
		t.Reset(time.Until(time.Unix(0, c.nextPing)))
	}
}

// postPing sends one ping and counts it as a keepalive when the server
// answers 204.
func (w *worker) postPing(ctx context.Context, hc *http.Client, post string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, post, bytes.NewReader(appPing))
	if err != nil {
		return fmt.Errorf("make ping request: %w", err)
	}
	req.Header.Set("Content-Type", "text/plain")
	sent := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("POST ping: %w", err)
	}
	if time.Since(sent) > slowAfter {
		atomic.AddInt64(&w.c.SlowPings, 1)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("POST ping: %s", resp.Status)
	}
	atomic.AddInt64(&w.c.Keepalives, 1)
	return nil
}
