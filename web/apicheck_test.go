package web_test

import (
	"net/http"
	"os"
	"testing"

	"github.com/presenced/presenced/internal/apicheck"
)

// TestMain checks the traffic of these tests against docs/openapi.yaml and
// docs/schema: every frame of the Hubs run in-process and of the presenced
// processes (built with -tags apicheck), whoever the client, Chromium
// included; the HTTP exchanges of the in-process Hubs, and those of
// http.DefaultClient with the processes.
func TestMain(m *testing.M) {
	http.DefaultTransport = apicheck.RoundTripper(http.DefaultTransport)
	os.Exit(apicheck.MainWithServers(m))
}
