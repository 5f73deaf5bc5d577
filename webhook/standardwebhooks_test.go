package webhook_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/webhook"
)

// clientDir holds the JavaScript client's package, whose dev dependencies
// include standardwebhooks, the Standard Webhooks reference library.
var clientDir = filepath.Join("..", "web", "client")

// TestStandardWebhooksLibraryVerifies runs web/client/test/webhook.test.js
// (node --test), which checks real Senders' POSTs with the standardwebhooks
// npm package: an implementation of the scheme written elsewhere. The Node
// side serves the webhook endpoint and asks for Senders through a control
// endpoint served here, found in $PRESENCED_WEBHOOK_CONTROL:
//
//	POST /senders {"url":"http://127.0.0.1:port/","secret":"whsec_...","max_batch":3,"events":[...]}
//
// makes a Sender for url and secret, adds the events and runs it until the
// test ends.
func TestStandardWebhooksLibraryVerifies(t *testing.T) {
	node := needNode(t)
	ctx, cancel := context.WithCancel(context.Background())
	var runs sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		runs.Wait()
	})

	mux := http.NewServeMux()
	mux.HandleFunc("POST /senders", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			URL      string          `json:"url"`
			Secret   string          `json:"secret"`
			MaxBatch int             `json:"max_batch"`
			Events   []webhook.Event `json:"events"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s, err := webhook.New(webhook.Config{URL: req.URL, Secret: req.Secret, MaxBatch: req.MaxBatch,
			MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.Add(req.Events...)
		runs.Add(1)
		go func() {
			defer runs.Done()
			_ = s.Run(ctx)
		}()
		w.WriteHeader(http.StatusNoContent)
	})
	control := httptest.NewServer(mux)
	t.Cleanup(control.Close)

	run, stop := context.WithTimeout(context.Background(), 3*time.Minute)
	defer stop()
	cmd := exec.CommandContext(run, node, "--test", "--test-reporter=spec", "--test-concurrency=1",
		filepath.Join("test", "webhook.test.js"))
	cmd.Dir = clientDir
	cmd.Env = append(os.Environ(), "PRESENCED_WEBHOOK_CONTROL="+control.URL)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	require.NoError(t, err, "node --test failed")
	assert.Regexp(t, `(?m)skipped 0$`, string(out), "the Node side skipped tests")
}

// needNode returns the node binary when it and the client's node_modules
// (with standardwebhooks) are there; else it skips, except in CI, where
// that is a broken setup.
func needNode(t *testing.T) string {
	t.Helper()
	fail := func(msg string) {
		if os.Getenv("CI") != "" {
			t.Fatal(msg + "; CI is set, so this is a failure")
		}
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		fail("no node on PATH: install Node 20 to check webhooks with the standardwebhooks library")
	}
	if _, err := os.Stat(filepath.Join(clientDir, "node_modules", "standardwebhooks")); err != nil {
		fail("web/client/node_modules/standardwebhooks is missing: run `npm ci` in web/client to check webhooks with it")
	}
	return node
}
