// Package apicheck checks the suite's traffic against the server's
// machine-readable descriptions in docs/: every HTTP exchange against the
// OpenAPI document (kin-openapi), every WebSocket frame against the JSON
// Schemas of the frames (santhosh-tekuri/jsonschema), so a field renamed in
// code and not in the docs fails the tests. Only tests import it: the
// server does not link these libraries.
//
// A package wires it with a TestMain that calls Main, which taps every frame
// a transport.Hub reads or writes, and wraps its test servers' handlers
// with Handler (or its clients' transports with RoundTripper).
package apicheck

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/presenced/presenced/docs"
	"github.com/presenced/presenced/internal/wiretap"
)

// CountsEnv makes Main report what it validated: set to a file name, it
// appends a line there; set to 1, it writes it to stderr.
const CountsEnv = "APICHECK_COUNTS"

// Counts are what a Checker has seen.
type Counts struct {
	HTTP        int64 // exchanges whose request and answer were validated
	HTTPRefused int64 // requests the description rejects, refused by the server as documented
	HTTPUnknown int64 // requests for undocumented paths or methods, refused as documented
	FramesOut   int64 // server frames validated
	FramesIn    int64 // client frames validated
	Malformed   int64 // client frames both the schema and the server refuse (robustness tests)
	Binary      int64 // binary client frames: no content to check
	Foreign     int64 // a RoundTripper's exchanges outside the API: page assets, a test's own handlers
}

// A Checker validates exchanges and frames and keeps the failures for the
// test that made them, or for Main.
type Checker struct {
	doc    *openapi3.T
	router routers.Router
	client *jsonschema.Schema
	server *jsonschema.Schema

	mu       sync.Mutex
	failures []string
	seen     map[uint64]string // frames already checked, and their failure
	report   func(string)      // where failures go in a server process
	collect  func()            // gathers what server processes reported

	http, httpRefused, httpUnknown            atomic.Int64
	framesOut, framesIn, malformed, binaryIns atomic.Int64
	foreign                                   atomic.Int64
}

// New loads the descriptions from package docs.
func New() (*Checker, error) {
	raw, err := fs.ReadFile(docs.FS, "openapi.yaml")
	if err != nil {
		return nil, err
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		return nil, fmt.Errorf("apicheck: load openapi.yaml: %w", err)
	}
	doc.Servers = nil // match requests whatever host the test serves on
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("apicheck: openapi.yaml: %w", err)
	}
	c := &Checker{doc: doc, router: router, seen: map[uint64]string{}}
	comp := jsonschema.NewCompiler()
	for _, name := range []string{"client-frames.json", "server-frames.json"} {
		raw, err := fs.ReadFile(docs.FS, "schema/"+name)
		if err != nil {
			return nil, err
		}
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("apicheck: %s: %w", name, err)
		}
		if err := comp.AddResource(SchemaURL(name), v); err != nil {
			return nil, fmt.Errorf("apicheck: %s: %w", name, err)
		}
	}
	if c.client, err = comp.Compile(SchemaURL("client-frames.json")); err != nil {
		return nil, fmt.Errorf("apicheck: client-frames.json: %w", err)
	}
	if c.server, err = comp.Compile(SchemaURL("server-frames.json")); err != nil {
		return nil, fmt.Errorf("apicheck: server-frames.json: %w", err)
	}
	return c, nil
}

// SchemaURL is the $id of a schema of docs/schema.
func SchemaURL(name string) string {
	return "https://github.com/presenced/presenced/docs/schema/" + name
}

// Doc is the OpenAPI document.
func (c *Checker) Doc() *openapi3.T { return c.doc }

// Counts returns what c has validated so far.
func (c *Checker) Counts() Counts {
	return Counts{HTTP: c.http.Load(), HTTPRefused: c.httpRefused.Load(), HTTPUnknown: c.httpUnknown.Load(),
		FramesOut: c.framesOut.Load(), FramesIn: c.framesIn.Load(), Malformed: c.malformed.Load(), Binary: c.binaryIns.Load(), Foreign: c.foreign.Load()}
}

// Failures returns every failure not yet handed to a test, and forgets
// them.
func (c *Checker) Failures() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.failures
	c.failures = nil
	return f
}

func (c *Checker) fail(msg string) {
	if c.report != nil {
		c.report(msg)
		return
	}
	c.mu.Lock()
	c.failures = append(c.failures, msg)
	c.mu.Unlock()
}

// Default is the Checker of Main, Handler and RoundTripper.
var Default = func() *Checker {
	c, err := New()
	if err != nil {
		panic(err)
	}
	return c
}()

// Main runs a package's tests with every frame any transport.Hub reads
// or writes checked by Default, and fails the run when a frame, or an
// exchange no test claimed, broke the description. Call it from TestMain:
// os.Exit(apicheck.Main(m)). With APICHECK_COUNTS set it reports the counts (see CountsEnv).
func Main(m *testing.M) int {
	wiretap.Frame = Default.Frame
	code := m.Run()
	if Default.collect != nil {
		Default.collect()
	}
	if failures := Default.Failures(); len(failures) > 0 {
		sort.Strings(failures)
		fmt.Fprintf(os.Stderr, "apicheck: %d exchanges or frames do not match docs/openapi.yaml and docs/schema:\n", len(failures))
		for _, f := range dedupe(failures) {
			fmt.Fprintln(os.Stderr, "  "+f)
		}
		code = max(code, 1)
	}
	if to := os.Getenv(CountsEnv); to != "" && Default.Counts() != (Counts{}) {
		printCounts(to)
	}
	return code
}

// printCounts appends the counts to the file to names, or writes them to
// stderr when to is "1" (go test shows it only with -v or on failure).
func printCounts(to string) {
	line := fmt.Sprintf("apicheck: %s: %s\n", strings.TrimSuffix(filepath.Base(os.Args[0]), ".test"), Default.Counts())
	if to == "1" {
		fmt.Fprint(os.Stderr, line)
		return
	}
	f, err := os.OpenFile(to, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		return
	}
	defer f.Close()
	f.WriteString(line)
}

func (n Counts) String() string {
	return fmt.Sprintf("HTTP %d exchanges validated (+%d bad requests and %d unknown paths or methods refused as documented); "+
		"frames %d out, %d in validated (+%d malformed refused by schema and server alike, %d binary); %d HTTP exchanges outside the API",
		n.HTTP, n.HTTPRefused, n.HTTPUnknown, n.FramesOut, n.FramesIn, n.Malformed, n.Binary, n.Foreign)
}

// dedupe keeps each failure once, with how often it happened.
func dedupe(sorted []string) []string {
	var out []string
	for i := 0; i < len(sorted); {
		j := i
		for j < len(sorted) && sorted[j] == sorted[i] {
			j++
		}
		if j-i > 1 {
			out = append(out, fmt.Sprintf("%s (x%d)", sorted[i], j-i))
		} else {
			out = append(out, sorted[i])
		}
		i = j
	}
	return out
}

// short quotes at most 300 bytes of b.
func short(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// oneLine keeps a validation error readable in a list.
func oneLine(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 600 {
		s = s[:600] + "..."
	}
	return s
}

var background = context.Background()
