package apicheck

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
)

// checkedHeader marks a request a RoundTripper validates, so that a Handler
// on the other end does not count it twice.
const checkedHeader = "Apicheck-Validated"

// bodyLimit bounds what is kept of an answer to validate it; the answers
// described are far smaller.
const bodyLimit = 4 << 20

// Handler wraps next, a server under test, so every exchange it serves is
// validated against openapi.yaml; what does not match fails t when its
// cleanup runs (or Main, for exchanges after that).
func Handler(t testing.TB, next http.Handler, opts ...Option) http.Handler {
	return Default.Handler(t, next, opts...)
}

// An Option changes what a Handler checks.
type Option int

// OwnAuth is for a Hub with an Authenticator of the embedder's: its clients
// identify themselves in ways the description does not know, so the
// identity of /ws and /api/heartbeat requests is not checked.
const OwnAuth Option = 1

// RoundTripper wraps next, a client's transport, so every exchange with a
// documented path (or under /api/) is validated against openapi.yaml, for
// servers a test cannot wrap; what does not match fails the run in Main.
func RoundTripper(next http.RoundTripper) http.RoundTripper { return Default.RoundTripper(next) }

// Handler is the package's Handler with c.
func (c *Checker) Handler(t testing.TB, next http.Handler, opts ...Option) http.Handler {
	sink := c.sink(t)
	ownAuth := slices.Contains(opts, OwnAuth)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(checkedHeader) != "" { // a RoundTripper validates it
			r.Header.Del(checkedHeader)
			next.ServeHTTP(w, r)
			return
		}
		ex, reqErr := c.request(r, ownAuth)
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		status := rec.status
		if rec.hijacked {
			status = http.StatusSwitchingProtocols
		} else if status == 0 {
			status = http.StatusOK
		}
		if msg := c.exchange(ex, reqErr, r, status, rec.header(), rec.body.Bytes()); msg != "" {
			sink(msg)
		}
	})
}

// RoundTripper is the package's RoundTripper with c.
func (c *Checker) RoundTripper(next http.RoundTripper) http.RoundTripper {
	return &roundTripper{next: next, rt: func(r *http.Request) (*http.Response, error) {
		if _, _, err := c.router.FindRoute(r); err != nil && err.Error() == routers.ErrPathNotFound.Error() && !strings.HasPrefix(r.URL.Path, "/api/") {
			c.foreign.Add(1) // the demo page's assets, a webhook receiver, a browser's endpoint
			return next.RoundTrip(r)
		}
		// Validate a copy: the request is sent as it came.
		vr := r.Clone(r.Context())
		if r.Body != nil && r.GetBody != nil {
			if body, err := r.GetBody(); err == nil {
				vr.Body = body
			}
		} else if r.Body != nil {
			raw, err := io.ReadAll(r.Body)
			r.Body.Close()
			if err != nil {
				return nil, err
			}
			r.Body, vr.Body = io.NopCloser(bytes.NewReader(raw)), io.NopCloser(bytes.NewReader(raw))
		}
		ex, reqErr := c.request(vr, false)
		sent := r.Clone(r.Context())
		sent.Header.Set(checkedHeader, "1")
		resp, err := next.RoundTrip(sent)
		if err != nil {
			return resp, err
		}
		if isStream(resp.Header) {
			// A stream of events lasts as long as its connection: its
			// status and headers are checked now, its frames as the
			// server writes them (Main's tap, or a server process's).
			if ex.input != nil {
				opts := *ex.input.Options
				opts.ExcludeResponseBody = true
				ex.input.Options = &opts
			}
			if msg := c.exchange(ex, reqErr, r, resp.StatusCode, resp.Header, nil); msg != "" {
				c.fail(msg)
			}
			return resp, nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if err != nil {
			return resp, nil // the client sees the short body; nothing to validate
		}
		if resp.StatusCode == http.StatusNotFound && !isError(resp.Header, body) {
			c.foreign.Add(1) // a test's own mux answered, not presenced
			return resp, nil
		}
		if msg := c.exchange(ex, reqErr, r, resp.StatusCode, resp.Header, body); msg != "" {
			c.fail(msg)
		}
		return resp, nil
	}}
}

type roundTripper struct {
	next http.RoundTripper
	rt   func(*http.Request) (*http.Response, error)
}

func (t *roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return t.rt(r) }

// CloseIdleConnections passes on http.Client.CloseIdleConnections.
func (t *roundTripper) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// sink returns where a Handler's failures go: to t until its cleanup,
// then to Main.
func (c *Checker) sink(t testing.TB) func(string) {
	var mu sync.Mutex
	var pending []string
	done := false
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		done = true
		for _, msg := range pending {
			t.Errorf("apicheck: %s", msg)
		}
	})
	return func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		if done {
			c.fail(msg)
			return
		}
		pending = append(pending, msg)
	}
}

// exchangeInput is what request found of a request.
type exchangeInput struct {
	input    *openapi3filter.RequestValidationInput
	routeErr error // ErrPathNotFound or ErrMethodNotAllowed
	head     bool
	ownAuth  bool // identity not checked: a 400 may be the embedder's
}

// request finds r's operation and validates r, leaving its body readable.
func (c *Checker) request(r *http.Request, ownAuth bool) (exchangeInput, error) {
	head := r.Method == http.MethodHead
	fr := r
	if head { // net/http serves HEAD with GET, without a body
		fr = r.Clone(r.Context())
		fr.Method = http.MethodGet
	}
	route, params, err := c.router.FindRoute(fr)
	if err != nil {
		return exchangeInput{routeErr: err}, nil
	}
	if ct := fr.Header.Get("Content-Type"); fr.Body != nil && fr.Body != http.NoBody && !strings.HasPrefix(ct, "application/json") &&
		!declares(route, ct) {
		// The server reads a body as JSON whatever it is labelled: a page's
		// fetch of a string sends text/plain, and spares a preflight.
		if fr == r {
			fr = r.Clone(r.Context())
		}
		fr.Header.Set("Content-Type", "application/json")
	}
	auth := credentials
	if ownAuth {
		auth = openapi3filter.NoopAuthenticationFunc
	}
	in := &openapi3filter.RequestValidationInput{Request: fr, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: auth, ExcludeResponseBody: head,
			IncludeResponseStatus: true}}
	var raw []byte
	if fr.Body != nil && fr.Body != http.NoBody {
		raw, _ = io.ReadAll(fr.Body)
		fr.Body = io.NopCloser(bytes.NewReader(raw))
	}
	reqErr := openapi3filter.ValidateRequest(background, in)
	if reqErr == nil && len(raw) > 0 && strings.HasPrefix(fr.Header.Get("Content-Type"), "application/json") && !json.Valid(raw) {
		reqErr = errors.New("the body is not one JSON value") // kin-openapi reads the first one only
	}
	if raw != nil {
		r.Body = io.NopCloser(bytes.NewReader(raw)) // for the server
	}
	return exchangeInput{input: in, head: head, ownAuth: ownAuth}, reqErr
}

// credentials checks that a request presents what one of its operation's
// security schemes asks for; whether it is good is the server's business.
func credentials(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	r, s := in.RequestValidationInput.Request, in.SecurityScheme
	switch {
	case s.Type == "http" && strings.EqualFold(s.Scheme, "bearer"):
		if scheme, _, _ := strings.Cut(r.Header.Get("Authorization"), " "); strings.EqualFold(scheme, "bearer") {
			return nil
		}
	case s.Type == "apiKey" && s.In == "query":
		if r.URL.Query().Has(s.Name) {
			return nil
		}
	case s.Type == "apiKey" && s.In == "header":
		if r.Header.Get(s.Name) != "" {
			return nil
		}
	}
	return fmt.Errorf("no %s credential", in.SecuritySchemeName)
}

// hasToken reports whether r presents a JWT, whose claims the description
// cannot check: a bad subject is 400.
func hasToken(r *http.Request) bool {
	scheme, _, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	return strings.EqualFold(scheme, "bearer") || r.URL.Query().Has("token")
}

// declares reports whether route's request body may have content type ct,
// as for POST /sse/{session}, whose body is frames, one a line.
func declares(route *routers.Route, ct string) bool {
	rb := route.Operation.RequestBody
	if ct == "" || rb == nil || rb.Value == nil {
		return false
	}
	mt, _, _ := strings.Cut(ct, ";")
	return rb.Value.Content.Get(strings.TrimSpace(mt)) != nil
}

// isStream reports whether an answer is a stream of Server-Sent Events.
func isStream(h http.Header) bool {
	return strings.HasPrefix(h.Get("Content-Type"), "text/event-stream")
}

func init() {
	for _, typ := range []string{"text/html", "text/javascript", "application/openmetrics-text", "text/event-stream"} {
		openapi3filter.RegisterBodyDecoder(typ, openapi3filter.PlainBodyDecoder)
	}
}

// exchange validates an answer to a request, and the request against the
// answer: a request the description rejects must be refused (4xx), and one
// it accepts must not be refused as malformed (400).
func (c *Checker) exchange(ex exchangeInput, reqErr error, r *http.Request, status int, header http.Header, body []byte) string {
	what := fmt.Sprintf("%s %s -> %d", r.Method, r.URL.RequestURI(), status)
	if ex.input == nil {
		// Undocumented path or method: a JSON 404, or 405 with Allow.
		want := http.StatusNotFound
		if ex.routeErr.Error() == routers.ErrMethodNotAllowed.Error() {
			want = http.StatusMethodNotAllowed
		}
		switch {
		case status != want:
			return fmt.Sprintf("%s: not in docs/openapi.yaml (%v), so it should be %d", what, ex.routeErr, want)
		case want == http.StatusMethodNotAllowed && header.Get("Allow") == "":
			return what + ": a 405 without Allow"
		case ex.routeErr != nil && !isError(header, body) && r.Method != http.MethodHead:
			return fmt.Sprintf("%s: not an error body %s", what, short(body))
		}
		c.httpUnknown.Add(1)
		return ""
	}
	switch {
	case reqErr != nil && status < 400:
		return fmt.Sprintf("%s: docs/openapi.yaml rejects the request (%s), the server accepted it", what, oneLine(reqErr))
	case reqErr == nil && status == http.StatusBadRequest && !hasToken(r) && !ex.ownAuth:
		return fmt.Sprintf("%s: docs/openapi.yaml accepts the request, the server answered 400 %s", what, short(body))
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: ex.input, Status: status, Header: header,
		Options: ex.input.Options}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(background, out); err != nil {
		return fmt.Sprintf("%s: the answer does not match docs/openapi.yaml: %s; body %s", what, oneLine(err), short(body))
	}
	if reqErr != nil {
		c.httpRefused.Add(1)
	} else {
		c.http.Add(1)
	}
	return ""
}

func isError(h http.Header, body []byte) bool {
	var e map[string]any
	if !strings.HasPrefix(h.Get("Content-Type"), "application/json") || json.Unmarshal(body, &e) != nil {
		return false
	}
	msg, ok := e["error"].(string)
	return ok && msg != "" && len(e) == 1
}

// recorder passes an answer on and keeps its status, headers and body.
type recorder struct {
	http.ResponseWriter
	status   int
	hdr      http.Header
	body     bytes.Buffer
	hijacked bool
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
		r.hdr = r.ResponseWriter.Header().Clone()
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if r.body.Len() < bodyLimit {
		r.body.Write(b)
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) header() http.Header {
	if r.hdr == nil {
		return r.ResponseWriter.Header()
	}
	return r.hdr
}

// Hijack hands over the connection, for the WebSocket upgrade.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	r.hijacked = true
	return http.NewResponseController(r.ResponseWriter).Hijack()
}

func (r *recorder) Flush() { http.NewResponseController(r.ResponseWriter).Flush() }

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
