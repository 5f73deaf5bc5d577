// Package nginxtest runs Debian's nginx as a plain reverse proxy in front of
// servers under test: a temporary configuration on a free loopback port,
// proxy_pass to a round-robin upstream, no upgrade headers, buffering at its
// default, the way a proxy that knows nothing of WebSockets is set up. It
// is stopped by its PID when the test ends.
package nginxtest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Upstream is the name of the upstream, which nginx sends as the Host of
// what it proxies: a server under test answers it (presenced: -hosts).
const Upstream = "presenced"

// Find returns the path of the nginx binary: on PATH, or where Debian puts it.
func Find() (string, error) {
	bin, err := exec.LookPath("nginx")
	if err == nil {
		return bin, nil
	}
	for _, p := range []string{"/usr/sbin/nginx", "/usr/local/sbin/nginx"} {
		if _, serr := os.Stat(p); serr == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("find nginx: %w", err)
}

// Proxy is one nginx process.
type Proxy struct {
	Addr string // 127.0.0.1:port
	URL  string // http://Addr

	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs nginx on a free loopback port, proxying every path to
// upstreams (host:port each, taken in turn, request by request), and waits
// until it accepts connections. Without nginx the test is skipped, unless
// CI is set: then it fails.
func Start(t testing.TB, upstreams ...string) *Proxy {
	t.Helper()
	return StartAt(t, "", upstreams...)
}

// FreeAddr returns a loopback address no one listens on now, for StartAt:
// a server behind nginx may need to know nginx's address before it starts
// (as the origin of the pages nginx serves).
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// StartAt is Start listening on addr (127.0.0.1:port), or on a free port
// when addr is empty.
func StartAt(t testing.TB, addr string, upstreams ...string) *Proxy {
	t.Helper()
	bin, err := Find()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("nginx not found and CI is set: install it (apt-get install nginx): %v", err)
		}
		t.Skip("nginx not found; install it (apt-get install nginx) to run the tests through a proxy")
	}
	if addr == "" {
		addr = FreeAddr(t)
	}
	p := &Proxy{Addr: addr, URL: "http://" + addr, dir: t.TempDir(), done: make(chan struct{})}
	conf := filepath.Join(p.dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(p.config(upstreams)), 0o644); err != nil {
		t.Fatalf("write nginx.conf: %v", err)
	}
	// One process, as the user running the test: no workers to switch to
	// another user, and the PID is the one to stop.
	p.cmd = exec.Command(bin, "-p", p.dir, "-c", conf, "-e", filepath.Join(p.dir, "error.log"),
		"-g", "daemon off; master_process off;")
	out, err := os.Create(filepath.Join(p.dir, "stderr.log"))
	if err != nil {
		t.Fatalf("nginx log: %v", err)
	}
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	go func() { _ = p.cmd.Wait(); out.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("nginx error log:\n%s", p.read("error.log"))
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case <-p.done:
			t.Fatalf("nginx exited at start:\n%s%s", p.read("stderr.log"), p.read("error.log"))
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not listen on %s:\n%s", addr, p.read("error.log"))
		}
	}
}

// config is a proxy with nothing for WebSockets or streams: the defaults
// but for the paths, which are the test's directory.
func (p *Proxy) config(upstreams []string) string {
	var servers strings.Builder
	for _, u := range upstreams {
		fmt.Fprintf(&servers, "        server %s;\n", u)
	}
	return fmt.Sprintf(`pid %[1]s/nginx.pid;
events { worker_connections 256; }
http {
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    log_format upstream '$request_method $uri $status $upstream_addr';
    access_log %[1]s/access.log upstream;
    upstream presenced {
%[3]s    }
    server {
        listen %[2]s;
        location / {
            proxy_pass http://presenced;
        }
    }
}
`, p.dir, p.Addr, servers.String())
}

// Requests returns what nginx has logged so far: one line per request
// answered, "METHOD path status upstream".
func (p *Proxy) Requests() []string {
	var lines []string
	f, err := os.Open(filepath.Join(p.dir, "access.log"))
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

func (p *Proxy) read(name string) string {
	b, _ := os.ReadFile(filepath.Join(p.dir, name))
	return string(b)
}

// Stop ends nginx by its PID, quickly (SIGTERM), and waits for it; after
// 10 s it kills it.
func (p *Proxy) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
