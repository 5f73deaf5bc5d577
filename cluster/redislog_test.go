package cluster

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

// Never called: SetLogger is process-wide, but this must compile.
var _ = func() { redis.SetLogger(RedisLogger(nil)) }

func TestRedisLogger(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	RedisLogger(l).Printf(context.Background(), "redis: dial %s: %v", "127.0.0.1:1", "refused")
	assert.Equal(t, "level=WARN msg=\"redis: dial 127.0.0.1:1: refused\" component=go-redis\n", buf.String())

	buf.Reset()
	quiet := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError}))
	RedisLogger(quiet).Printf(context.Background(), "dropped")
	RedisLogger(nil).Printf(context.Background(), "dropped")
	assert.Empty(t, buf.String())
}
