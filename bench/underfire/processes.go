package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// binary is a presenced binary under measurement.
type binary struct {
	label string // before or after
	path  string
	flags map[string]bool // the flags its -h lists
}

// loadBinary reads the flags of the presenced at path from its -h.
func loadBinary(label, path string) (*binary, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%s binary: %w (build it: go build -o %s ./cmd/presenced)", label, err, path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, path, "-h").CombinedOutput() // -h exits 0 or 2
	b := &binary{label: label, path: path, flags: map[string]bool{}}
	for l := range strings.SplitSeq(string(out), "\n") {
		// The flag package lists each flag as "  -name" or "  -name type".
		if rest, ok := strings.CutPrefix(l, "  -"); ok {
			if name, _, _ := strings.Cut(rest, " "); name != "" {
				b.flags[name] = true
			}
		}
	}
	if !b.flags["addr"] {
		return nil, fmt.Errorf("%s binary %s: no -addr in its -h output, so no way to keep it on loopback:\n%s", label, path, out)
	}
	progress("%s: %s (%d flags)", label, path, len(b.flags))
	return b, nil
}

// optional are the flags that tune the features under fire: a binary
// without one lacks the feature, and runs without the flag.
var optional = map[string]bool{
	"queue-bytes": true, "frame-rate": true, "frame-burst": true, "byte-rate": true, "max-conns-per-user": true,
}

// known returns args, pairs of -name value, without the optional flags
// r.bin does not know; it records those in r.dropped. Any other flag r.bin
// does not know is an error: the scenario cannot be measured as meant.
func (r *run) known(args []string) ([]string, error) {
	if len(args)%2 != 0 {
		return nil, fmt.Errorf("presenced args not in -name value pairs: %q", args)
	}
	var out []string
	for i := 0; i < len(args); i += 2 {
		name := strings.TrimLeft(args[i], "-")
		switch {
		case r.bin.flags[name]:
			out = append(out, args[i], args[i+1])
		case optional[name]:
			r.dropped[name] = true
		default:
			return nil, fmt.Errorf("no such flag: this binary has no `-%s`", name)
		}
	}
	return out, nil
}

// proc is a child process: presenced or redis-server.
type proc struct {
	name string
	addr string // 127.0.0.1:port
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startProc starts path with args, its output to a new file in r.logDir.
func (r *run) startProc(name, path string, args []string) (*proc, error) {
	logPath := filepath.Join(r.logDir, fmt.Sprintf("%02d-%s-%s.log", r.logs.Add(1), r.bin.label, name))
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("log of %s: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// No PRESENCED_* from our environment: the flags say everything.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PRESENCED_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	return p, nil
}

// startPresenced runs r.bin on a free loopback port with args (-name value
// pairs, those r.bin knows) and waits until /healthz answers.
func (r *run) startPresenced(name string, args ...string) (*proc, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	args, err = r.known(append([]string{"-addr", addr}, args...))
	if err != nil {
		return nil, err
	}
	p, err := r.startProc(name, r.bin.path, args)
	if err != nil {
		return nil, err
	}
	p.addr = addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s exited at start; see %s", name, p.log)
		default:
		}
		if res, err := http.Get("http://" + addr + "/healthz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("%s never became healthy; see %s", name, p.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startRedis runs a redis-server without persistence on a free loopback port.
func (r *run) startRedis() (*proc, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	p, err := r.startProc("redis", r.redisBin, []string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no"})
	if err != nil {
		return nil, err
	}
	p.addr = addr
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			fmt.Fprint(c, "PING\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("redis-server did not come up; see %s", p.log)
		}
	}
}

func (p *proc) signal(sig syscall.Signal) {
	if err := p.cmd.Process.Signal(sig); err != nil {
		progress("%s: signal %v: %v", p.name, sig, err)
	}
}

// stop ends p with SIGTERM, or SIGKILL after 12 s; nothing if it has exited.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(12 * time.Second):
		progress("%s: no exit 12 s after SIGTERM, killing it", p.name)
		p.signal(syscall.SIGKILL)
		<-p.done
	}
}

func (p *proc) http() string { return "http://" + p.addr }

// userHZ is the unit of the CPU times in /proc/<pid>/stat: 1/100 s on Linux.
const userHZ = 100

// cpuSeconds is the CPU time process pid has used so far, user plus system,
// in seconds, from /proc/<pid>/stat.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu time: %w", err)
	}
	ticks, err := statTicks(string(b))
	if err != nil {
		return 0, fmt.Errorf("cpu time of %d: %w", pid, err)
	}
	return float64(ticks) / userHZ, nil
}

// statTicks is utime+stime, fields 14 and 15, of a /proc/<pid>/stat line.
func statTicks(stat string) (uint64, error) {
	// Field 2, the command, is in parentheses and may hold spaces and ')'.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command in %q", stat)
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command in %q, want at least 13", len(f), stat)
	}
	utime, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime: %w", err)
	}
	stime, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime: %w", err)
	}
	return utime + stime, nil
}
