// Package child starts, signals and stops the processes a bench harness runs
// (presenced, redis-server, Redis Sentinel), each on loopback with its output
// in a log file, and speaks enough of the Redis protocol to drive Redis.
package child

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Proc is a running child process.
type Proc struct {
	Name string
	Addr string // 127.0.0.1:port it serves on, when it serves
	Log  string // the file its stdout and stderr go to
	Cmd  *exec.Cmd
	done chan struct{}
}

// FreePort returns a loopback address nobody listens on now.
func FreePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Start runs path with args, its output appended to logPath, and an
// environment without PRESENCED_* variables: the flags say everything.
func Start(name, path string, args []string, logPath string) (*Proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("log of %s: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PRESENCED_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, done: make(chan struct{}), Log: logPath}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	return p, nil
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) error {
	if err := p.Cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s: signal %v: %w", p.Name, sig, err)
	}
	return nil
}

// Kill ends the process with SIGKILL and waits for its exit.
func (p *Proc) Kill() {
	_ = p.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop ends the process with SIGTERM, or SIGKILL when it has not exited
// within wait; nothing if it has exited. It says whether SIGKILL was needed.
func (p *Proc) Stop(wait time.Duration) (killed bool) {
	if p.Exited() {
		return false
	}
	_ = p.Thaw() // a stopped process cannot act on SIGTERM
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return false
	case <-time.After(wait):
		p.Kill()
		return true
	}
}

// WaitHTTP polls url until it answers 200, the process exits or d passes.
func (p *Proc) WaitHTTP(url string, d time.Duration) error {
	c := &http.Client{Timeout: 2 * time.Second}
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if p.Exited() {
			return fmt.Errorf("%s exited at start; see %s", p.Name, p.Log)
		}
		if res, err := c.Get(url); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not 200 within %v; see %s", p.Name, url, d, p.Log)
		}
	}
}

// StartRedis runs redisServer without persistence on addr (a free port when
// empty), with extra arguments, and waits until it answers PING. Its
// directory is the log's, and its RDB file is named after it: a replica
// writes the RDB of a full sync to disk, and a server started later in
// the same directory would load it.
func StartRedis(name, redisServer, addr, logPath string, extra ...string) (*Proc, error) {
	if addr == "" {
		var err error
		if addr, err = FreePort(); err != nil {
			return nil, err
		}
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("redis address %q: %w", addr, err)
	}
	args := append([]string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
		"--dir", filepath.Dir(logPath), "--dbfilename", name + "-" + port + ".rdb"}, extra...)
	p, err := Start(name, redisServer, args, logPath)
	if err != nil {
		return nil, err
	}
	p.Addr = addr
	if err := p.WaitRedis(10 * time.Second); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

// WaitRedis polls p with PING until it answers PONG, p exits or d passes.
func (p *Proc) WaitRedis(d time.Duration) error {
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if p.Exited() {
			return fmt.Errorf("%s exited at start; see %s", p.Name, p.Log)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err := Do(ctx, p.Addr, "PING")
		cancel()
		if err == nil && v == "PONG" {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("%s did not answer PING within %v; see %s", p.Name, d, p.Log), err)
		}
	}
}
