// Package presencedtest runs the presenced binary for tests that need a real
// process: signals, restarts, several nodes on one Redis. Its MemberList
// keeps a channel's members from the frames a client receives, for tests of
// paging through big channels.
package presencedtest

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Build builds cmd/presenced into a temporary directory of t and returns its
// path; $PRESENCED_BIN, when set, names a binary to use instead.
func Build(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("PRESENCED_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "presenced")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/presenced/presenced/cmd/presenced").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/presenced: %v\n%s", err, out)
	}
	return bin
}

// Process is a presenced process on a loopback port. Its output is kept and
// logged if the test fails.
type Process struct {
	Addr string // 127.0.0.1:port, the same across Restart
	URL  string // http://Addr

	t    testing.TB
	bin  string
	args []string
	out  SyncBuffer
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs bin with args and -addr on a free loopback port, and waits
// until /healthz answers 200. The test's cleanup stops it.
func Start(t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	p := &Process{Addr: addr, URL: "http://" + addr, t: t, bin: bin, args: args}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("presenced %v output:\n%s", args, p.Output())
		}
	})
	p.Restart()
	return p
}

// Restart runs the process again, at the same address, after Stop or an
// exit, and waits until it is healthy.
func (p *Process) Restart() {
	t := p.t
	t.Helper()
	p.cmd = exec.Command(p.bin, append([]string{"-addr", p.Addr}, p.args...)...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start presenced: %v", err)
	}
	done := make(chan struct{})
	p.done = done
	go func() { _ = p.cmd.Wait(); close(done) }()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case <-done:
			t.Fatalf("presenced exited at start:\n%s", p.Output())
		default:
		}
		if res, err := http.Get(p.URL + "/healthz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("presenced never became healthy:\n%s", p.Output())
		}
	}
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Wait waits for the process to exit and returns its exit code (-1 if a
// signal ended it).
func (p *Process) Wait() int {
	<-p.done
	return p.cmd.ProcessState.ExitCode()
}

// Stop sends SIGTERM, the graceful shutdown, and waits for the exit; after
// 10 s it kills the process. It does nothing if the process has exited.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Output returns what the process has written to stdout and stderr.
func (p *Process) Output() string { return p.out.String() }

// SyncBuffer is a bytes.Buffer that a server writes while a test reads it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
