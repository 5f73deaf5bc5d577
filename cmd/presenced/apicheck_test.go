package main

import (
	"net/http"
	"os"
	"testing"

	"github.com/presenced/presenced/internal/apicheck"
)

// TestMain checks every frame the server of these tests reads and writes
// against docs/schema, and every exchange of http.DefaultClient with it
// against docs/openapi.yaml: run builds its own mux, so the client side
// checks.
func TestMain(m *testing.M) {
	http.DefaultTransport = apicheck.RoundTripper(http.DefaultTransport)
	os.Exit(apicheck.Main(m))
}
