package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/presenced/presenced/bench/internal/child"
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
type proc struct{ *child.Proc }

// startProc starts path with args, its output to a new file in r.logDir.
func (r *run) startProc(name, path string, args []string) (*proc, error) {
	logPath := filepath.Join(r.logDir, fmt.Sprintf("%02d-%s-%s.log", r.logs.Add(1), r.bin.label, name))
	p, err := child.Start(name, path, args, logPath)
	if err != nil {
		return nil, err
	}
	return &proc{p}, nil
}

// startPresenced runs r.bin on a free loopback port with args (-name value
// pairs, those r.bin knows) and waits until /healthz answers.
func (r *run) startPresenced(name string, args ...string) (*proc, error) {
	addr, err := child.FreePort()
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
	p.Addr = addr
	if err := p.WaitHTTP(p.http()+"/healthz", 20*time.Second); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// startRedis runs a redis-server without persistence on a free loopback port.
func (r *run) startRedis() (*proc, error) {
	logPath := filepath.Join(r.logDir, fmt.Sprintf("%02d-%s-redis.log", r.logs.Add(1), r.bin.label))
	p, err := child.StartRedis("redis", r.redisBin, "", logPath)
	if err != nil {
		return nil, err
	}
	return &proc{p}, nil
}

func (p *proc) signal(sig syscall.Signal) {
	if err := p.Signal(sig); err != nil {
		progress("%v", err)
	}
}

// stop ends p with SIGTERM, or SIGKILL after 12 s; nothing if it has exited.
func (p *proc) stop() {
	if p.Stop(12 * time.Second) {
		progress("%s: no exit 12 s after SIGTERM, killed it", p.Name)
	}
}

// freeze and thaw stop and resume p's process, as a stalled machine would.
func (p *proc) freeze() {
	if err := p.Freeze(); err != nil {
		progress("%s: %v", p.Name, err)
	}
}

func (p *proc) thaw() { _ = p.Thaw() }

func (p *proc) http() string { return "http://" + p.Addr }

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
