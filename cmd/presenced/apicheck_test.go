package main

import (
	"net/http"
	"os"
	"testing"

	"github.com/presenced/presenced/internal/apicheck"
)

// TestMain checks every frame the servers of these tests read and write
// against docs/schema, those run in-process and the presenced processes
// (built with -tags apicheck) alike, and every exchange of
// http.DefaultClient with them against docs/openapi.yaml: run builds its
// own mux, so the client side checks.
func TestMain(m *testing.M) {
	http.DefaultTransport = apicheck.RoundTripper(http.DefaultTransport)
	os.Exit(apicheck.MainWithServers(m))
}
