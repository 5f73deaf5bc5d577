package transport_test

import (
	"net/http"
	"os"
	"testing"

	"github.com/presenced/presenced/internal/apicheck"
)

// TestMain checks every frame the Hubs of these tests read and write, and
// every HTTP exchange of http.DefaultClient, against docs/schema and
// docs/openapi.yaml; startServer's servers check the rest of their traffic.
func TestMain(m *testing.M) {
	http.DefaultTransport = apicheck.RoundTripper(http.DefaultTransport)
	os.Exit(apicheck.Main(m))
}
