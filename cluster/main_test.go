package cluster

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/presenced/presenced/internal/apicheck"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// TestMain silences go-redis's own logger: the tests kill Redis on purpose
// and its dial errors would bury the test output. Every frame the Hubs of
// these tests read and write is checked against docs/schema.
func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	os.Exit(apicheck.Main(m))
}
