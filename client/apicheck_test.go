package client_test

import (
	"os"
	"testing"

	"github.com/presenced/presenced/internal/apicheck"
)

// TestMain checks every frame the test servers' Hubs read and write
// against docs/schema; startServer checks their HTTP exchanges.
func TestMain(m *testing.M) { os.Exit(apicheck.Main(m)) }
