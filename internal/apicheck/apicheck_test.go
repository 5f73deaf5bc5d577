package apicheck_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/apicheck"
)

func TestFramesOfTheDescriptionPass(t *testing.T) {
	c, err := apicheck.New()
	require.NoError(t, err)
	for _, f := range []string{
		`{"type":"welcome","uid":"alice","timeout_ms":30000,"protocol":"2.2"}`,
		`{"type":"presence","channel":"lobby","count":3}`,
		`{"type":"presence","channel":"lobby","count":3,"joins":["a"],"leaves":[],"away":["a"]}`,
		`{"type":"status","online":[],"offline":["bob"],"last_seen":{"bob":1764000000000}}`,
		`{"type":"publish","channel":"lobby","data":[1,2]}`,
	} {
		c.Frame(false, []byte(f))
	}
	for _, f := range []string{`{"type":"ping"}`, `{"type":"members","channel":"a","after":null}`, `{"type":"app.cursor","x":1}`} {
		c.Frame(true, []byte(f))
	}
	c.Frame(true, []byte(`{"type":"join","channel":"no spaces"}`)) // refused by both
	c.Frame(true, []byte(`{"type":"join"`))
	c.Frame(true, nil)
	assert.Empty(t, c.Failures())
	assert.Equal(t, apicheck.Counts{FramesOut: 5, FramesIn: 3, Malformed: 2, Binary: 1}, c.Counts())
}

// A field renamed in code and not in the description fails.
func TestFramesThatDriftFail(t *testing.T) {
	c, err := apicheck.New()
	require.NoError(t, err)
	c.Frame(false, []byte(`{"type":"welcome","uid":"alice","timeoutMs":30000,"protocol":"2.2"}`))
	c.Frame(false, []byte(`{"type":"presence","channel":"lobby","count":3,"joins":["a"]}`)) // joins without leaves
	c.Frame(false, []byte(`{"type":"hello"}`))
	failures := c.Failures()
	assert.Len(t, failures, 3)
	assert.Contains(t, failures[0], "timeoutMs")
}

// fakeT collects what a Handler reports.
type fakeT struct {
	testing.TB
	mu       sync.Mutex
	errors   []string
	cleanups []func()
}

func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func (f *fakeT) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }

func (f *fakeT) done() []string {
	for _, fn := range f.cleanups {
		fn()
	}
	return f.errors
}

func TestHandlerChecksExchanges(t *testing.T) {
	answer := `{"count":1,"users":["alice"]}`
	server := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if r.URL.Query().Get("limit") == "5000" && !strings.Contains(answer, "lenient") {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":"limit must be a whole number from 0 to 1000"}`)
			return
		}
		fmt.Fprint(w, strings.ReplaceAll(answer, `"lenient":1,`, ""))
	})
	for _, tc := range []struct {
		name, answer, query string
		fails               bool
	}{
		{"as described", `{"count":1,"users":["alice"]}`, "?limit=10", false},
		{"refused as described", `{"count":1,"users":["alice"]}`, "?limit=5000", false},
		{"a field renamed", `{"count":1,"online":["alice"]}`, "", true},
		{"a bad request served", `{"lenient":1,"count":1,"users":["alice"]}`, "?limit=5000", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer = tc.answer
			ft := &fakeT{TB: t}
			srv := httptest.NewServer(apicheck.Handler(ft, server))
			resp, err := http.Get(srv.URL + "/api/presence" + tc.query)
			require.NoError(t, err)
			resp.Body.Close()
			srv.Close()
			errs := ft.done()
			if tc.fails {
				assert.Len(t, errs, 1)
			} else {
				assert.Empty(t, errs)
			}
		})
	}
}
