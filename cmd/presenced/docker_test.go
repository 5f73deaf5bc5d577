package main

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
)

// TestDockerfile builds the repository's Dockerfile where a builder is
// installed, without a registry and without running a container: the
// build stage (which would pull golang) is replaced by a static binary
// built here, through a named build context, and the final stage is
// scratch, which needs no pull. The image's binary is then copied out of a
// created (never started) container and run with -version.
func TestDockerfile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the server and an image: not in -short")
	}
	builder := needBuilder(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := func(name string, args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "%s %s:\n%s%s", name, strings.Join(args, " "), stdout.String(), stderr.String())
		return stdout.String()
	}

	// What the build stage leaves in /out.
	stage := t.TempDir()
	bin := filepath.Join(stage, "out", "presenced")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build:\n%s", out)
	assertStatic(t, bin)
	certs := filepath.Join(stage, "out", "etc", "ssl", "certs", "ca-certificates.crt")
	require.NoError(t, os.MkdirAll(filepath.Dir(certs), 0o755))
	bundle, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		bundle = nil // an empty bundle serves this test as well
	}
	require.NoError(t, os.WriteFile(certs, bundle, 0o644))

	dockerfile, err := filepath.Abs(filepath.Join("..", "..", "Dockerfile"))
	require.NoError(t, err)
	image := fmt.Sprintf("localhost/presenced-dockerfile-test:%d", os.Getpid())
	// An empty main context: the replaced build stage is the only one that
	// reads it.
	run(builder, "build", "--build-context", "build="+stage, "-f", dockerfile, "-t", image, t.TempDir())
	t.Cleanup(func() { exec.Command(builder, "rmi", "-f", image).Run() })

	var cfg struct {
		User         string
		Entrypoint   []string
		Cmd          []string
		Env          []string
		ExposedPorts map[string]struct{}
	}
	require.NoError(t, json.Unmarshal([]byte(run(builder, "image", "inspect", "--format", "{{json .Config}}", image)), &cfg))
	assert.Equal(t, "65532:65532", cfg.User, "not root")
	assert.Equal(t, []string{"/presenced"}, cfg.Entrypoint)
	assert.Contains(t, cfg.Env, "PRESENCED_ADDR=:8080", "listens on every interface of the container")
	assert.Contains(t, cfg.ExposedPorts, "8080/tcp")

	// Created, not started: a container's files can be copied out.
	name := fmt.Sprintf("presenced-dockerfile-test-%d", os.Getpid())
	run(builder, "create", "--name", name, image)
	t.Cleanup(func() { exec.Command(builder, "rm", "-f", name).Run() })
	got := filepath.Join(t.TempDir(), "presenced")
	run(builder, "cp", name+":/presenced", got)
	run(builder, "cp", name+":/etc/ssl/certs/ca-certificates.crt", filepath.Join(t.TempDir(), "ca.crt"))
	assertStatic(t, got)

	version := run(got, "-version")
	assert.Regexp(t, `^presenced \S+ protocol `+regexp.QuoteMeta(protocol.Version)+`\n$`, version)
	t.Logf("%s image %s: %s", builder, image, strings.TrimSpace(version))
}

// needBuilder returns podman, or docker, where one is installed; else it
// skips, except in CI, where that is a broken setup.
func needBuilder(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"podman", "docker"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "no image builder found (looked for podman and docker): " +
		"install Debian's podman with `apt-get install podman` to build the Dockerfile"
	if os.Getenv("CI") != "" {
		t.Fatal(msg + "; CI is set, so this is a failure")
	}
	t.Skip(msg)
	return ""
}

// assertStatic checks that bin is an ELF executable with no dynamic
// loader: it runs on scratch, where there is no libc.
func assertStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "%s is dynamically linked", bin)
	}
	_, err = f.DynamicSymbols()
	assert.True(t, errors.Is(err, elf.ErrNoSymbols), "%s has dynamic symbols: %v", bin, err)
}
