package cluster

import (
	"context"
	"fmt"
	"log/slog"
)

// RedisLogger adapts l for redis.SetLogger. That setting is process-wide, so
// a program's main calls it once; this package never does. Lines go out at
// Warn level with the attribute component=go-redis; a nil l discards them.
func RedisLogger(l *slog.Logger) interface {
	Printf(ctx context.Context, format string, v ...any)
} {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return redisLogger{l.With("component", "go-redis")}
}

type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if !r.l.Enabled(ctx, slog.LevelWarn) {
		return // skip formatting a line nobody reads
	}
	r.l.Log(ctx, slog.LevelWarn, fmt.Sprintf(format, v...))
}
