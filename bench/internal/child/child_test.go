package child

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A real redis-server answers Do with each kind of reply, and starts empty
// even where another server left an RDB file.
func TestRedisReplies(t *testing.T) {
	server, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server not found and CI is set: %v", err)
		}
		t.Skip("redis-server not found (apt-get install redis-server)")
	}
	dir := t.TempDir()
	p, err := StartRedis("redis", server, "", filepath.Join(dir, "redis.log"))
	require.NoError(t, err)
	defer p.Stop(5 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tests := []struct {
		args []string
		want any
	}{
		{[]string{"SET", "k", "v\r\nw"}, "OK"},
		{[]string{"GET", "k"}, "v\r\nw"},
		{[]string{"GET", "missing"}, nil},
		{[]string{"RPUSH", "l", "a", "b"}, int64(2)},
		{[]string{"LRANGE", "l", "0", "-1"}, []any{"a", "b"}},
		{[]string{"LRANGE", "missing", "0", "-1"}, []any{}},
	}
	for _, tt := range tests {
		got, err := Do(ctx, p.Addr, tt.args...)
		require.NoError(t, err, tt.args)
		assert.Equal(t, tt.want, got, tt.args)
	}
	_, err = Do(ctx, p.Addr, "INCR", "k")
	var re RedisError
	require.ErrorAs(t, err, &re)
	assert.Contains(t, string(re), "not an integer")

	// A SAVE leaves an RDB file in the directory; another server there
	// still starts empty.
	_, err = Do(ctx, p.Addr, "SAVE")
	require.NoError(t, err)
	q, err := StartRedis("redis", server, "", filepath.Join(dir, "redis2.log"))
	require.NoError(t, err)
	defer q.Stop(5 * time.Second)
	n, err := Do(ctx, q.Addr, "DBSIZE")
	require.NoError(t, err)
	assert.Equal(t, int64(0), n)
}
