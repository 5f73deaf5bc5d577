package deploy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/presencedtest"
)

// wait is how long a test waits on a condition: generous, for a busy machine.
const wait = 60 * time.Second

// redisProcess is a redis-server of the test's own.
type redisProcess struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// startRedis runs a redis-server on a free loopback port, with no
// persistence, until the test ends.
func startRedis(t *testing.T) *redisProcess {
	t.Helper()
	bin := lookTool(t, "redis-server", "redis-server")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	dir := t.TempDir()
	r := &redisProcess{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), done: make(chan struct{})}
	r.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	require.NoError(t, r.cmd.Start())
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	t.Cleanup(r.stop)
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", r.addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, wait, 20*time.Millisecond, "redis-server on %s", r.addr)
	return r
}

// stop kills the server and waits for its end.
func (r *redisProcess) stop() {
	select {
	case <-r.done:
	default:
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

// startNodes runs n presenced nodes in demo mode on one Redis, each sending
// its edges to a webhook that takes them, with more args, and waits until
// all are ready.
func startNodes(t *testing.T, redis *redisProcess, n int, args ...string) []*presencedtest.Process {
	t.Helper()
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	bin := presenced(t)
	var nodes []*presencedtest.Process
	for i := range n {
		own := []string{"-redis", "redis://" + redis.addr, "-node", "n" + strconv.Itoa(i+1), "-webhook", hook.URL, "-tick", "100ms"}
		nodes = append(nodes, presencedtest.Start(t, bin, append(own, args...)...))
	}
	for _, p := range nodes {
		require.Eventually(t, func() bool { return status(p.URL+"/readyz") == http.StatusOK }, wait, 50*time.Millisecond, "%s ready", p.URL)
	}
	return nodes
}

// status is the status of a GET of url, 0 if it failed.
func status(url string) int {
	res, err := http.Get(url)
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}
