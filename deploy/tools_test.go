package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// helmVersion is the Helm the chart is checked with.
const helmVersion = "v3.22.0"

// bin is the test run's directory of built tools.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "presenced-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// built builds a tool once per test run and returns its path.
type built struct {
	once sync.Once
	path string
	err  error
}

var helmBuild, serverBuild built

// get builds with args (run in dir) the first time and fails t if that failed.
func (b *built) get(t *testing.T, name, dir string, args ...string) string {
	t.Helper()
	b.once.Do(func() {
		start := time.Now()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOBIN="+bin)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go %v: %w\n%s", args, err, out)
			return
		}
		b.path = filepath.Join(bin, name)
		t.Logf("built %s in %s", name, time.Since(start).Round(time.Second))
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// helm returns the path of the Helm binary, built from its module.
func helm(t *testing.T) string {
	// GOFLAGS=-mod=mod is not needed: go install pkg@version ignores this module.
	return helmBuild.get(t, "helm", ".", "install", "helm.sh/helm/v3/cmd/helm@"+helmVersion)
}

// presenced returns the path of the server, built from this checkout;
// $PRESENCED_BIN, when set, names a binary to use instead.
func presenced(t *testing.T) string {
	if bin := os.Getenv("PRESENCED_BIN"); bin != "" {
		return bin
	}
	return serverBuild.get(t, "presenced", "..", "build", "-o", filepath.Join(bin, "presenced"), "./cmd/presenced")
}

// run runs a tool and returns its standard output; a failure carries the
// standard error.
func run(name string, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %v: %w\n%s%s", filepath.Base(name), args, err, out.Bytes(), errOut.Bytes())
	}
	return out.String(), nil
}

// lookTool finds an installed tool; without it the test is skipped, or
// fails under CI, which installs it.
func lookTool(t *testing.T, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s not found, and CI installs it (Debian package %s): %v", name, pkg, err)
	}
	t.Skipf("%s not found (Debian package %s): %v", name, pkg, err)
	return ""
}
