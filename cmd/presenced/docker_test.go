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
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/protocol"
)

// TestDockerfile builds the repository's Dockerfile where a builder is
// installed, by the README's command, without a registry and without
// running a container: the build stage (which would pull golang) is
// replaced by a static binary built here, through a named build context,
// and the final stage is scratch, which needs no pull. The image's binary
// is then copied out of a created (never started) container and run with
// -version.
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

	image := fmt.Sprintf("localhost/presenced-dockerfile-test:%d", os.Getpid())
	args := testBuild(readmeBuild(t), stage, image)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, builder, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, &stdout, &stderr
	require.NoError(t, cmd.Run(), "%s %s:\n%s%s", builder, strings.Join(args, " "), stdout.String(), stderr.String())
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

// readmeBuild returns the arguments of the image build README.md shows,
// after the builder's name.
func readmeBuild(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?m)^(podman|docker) (build [^#\n]*)").FindSubmatch(readme)
	require.NotNil(t, m, "README.md shows no podman or docker build")
	return strings.Fields(string(m[2]))
}

// testBuild is the README's build with the build stage supplied, and a tag
// of the test's own: the rest is as a user types it, in the checkout.
func testBuild(readme []string, stage, image string) []string {
	args := []string{readme[0], "--build-context", "build=" + stage}
	for i := 1; i < len(readme); i++ {
		args = append(args, readme[i])
		if readme[i] == "-t" && i+1 < len(readme) {
			args = append(args, image)
			i++
		}
	}
	return args
}

func TestTestBuildIsTheReadmes(t *testing.T) {
	readme := readmeBuild(t)
	assert.Equal(t, []string{"build", "-t", "presenced", "."}, readme, "the build README.md shows")
	assert.Equal(t, []string{"build", "--build-context", "build=/stage", "-t", "img", "."}, testBuild(readme, "/stage", "img"))
}

// TestDockerfileNamesItsBases checks that every FROM names its registry (or
// is scratch, or an earlier stage): podman, unlike docker, resolves no
// short name such as golang:1.26 without a search registry configured.
func TestDockerfileNamesItsBases(t *testing.T) {
	raw, err := os.ReadFile("../../Dockerfile")
	require.NoError(t, err)
	stages := map[string]bool{"scratch": true}
	froms := 0
	for line := range strings.SplitSeq(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.EqualFold(f[0], "FROM") {
			continue
		}
		froms++
		f = slices.DeleteFunc(f[1:], func(s string) bool { return strings.HasPrefix(s, "--") })
		if image := f[0]; !stages[image] {
			assert.True(t, qualified(image), "FROM %s: name the registry, as docker.io/library/golang:...", image)
		}
		if len(f) == 3 && strings.EqualFold(f[1], "AS") {
			stages[f[2]] = true // a base of the FROMs after this one
		}
	}
	assert.Positive(t, froms)
	for _, short := range []string{"golang:1.26", "library/golang", "localhost", "golang"} {
		assert.False(t, qualified(short), short)
	}
	for _, full := range []string{"docker.io/library/golang:${GO_VERSION}", "localhost/x:1", "registry.example:5000/a/b"} {
		assert.True(t, qualified(full), full)
	}
}

// qualified says whether image names its registry: a first path element
// with a dot or a port, or localhost.
func qualified(image string) bool {
	registry, _, ok := strings.Cut(image, "/")
	return ok && (strings.ContainsAny(registry, ".:") || registry == "localhost")
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
