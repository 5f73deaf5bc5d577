package cluster

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// allLuaScripts are the package's scripts, by their own files.
func allLuaScripts() []*luaScript {
	return []*luaScript{setScript, claimScript, leaveScript, recordScript, memberRecordScript,
		channelScript, usersScript, statusScript, recordsScript, hiddenScript, logScript, listingScript,
		publishScript, settleScript, timeScript}
}

// Every file of lua/ is part of a script, so TestLuacheck checks them all.
func TestLuaScriptsUseEveryFile(t *testing.T) {
	used := map[string]bool{}
	for _, s := range allLuaScripts() {
		for _, p := range s.parts {
			used[p.file] = true
		}
	}
	files, err := fs.Glob(luaFiles, "lua/*.lua")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		assert.True(t, used[strings.TrimPrefix(f, "lua/")], "%s is in no script", f)
	}
}

// A script is its files end to end, so a line of the whole is a line of one of them.
func TestLuaScriptLines(t *testing.T) {
	for _, s := range allLuaScripts() {
		lines := strings.Split(strings.TrimSuffix(s.src, "\n"), "\n")
		for n, text := range lines {
			file, line := s.where(n + 1)
			own := strings.Split(luaFile(file), "\n")
			require.Less(t, line-1, len(own), "%s line %d", s.name, n+1)
			require.Equal(t, own[line-1], text, "%s line %d is %s:%d", s.name, n+1, file, line)
		}
		assert.Equal(t, s.name, s.parts[len(s.parts)-1].file)
	}
	assert.Equal(t, "alive", shardKeyNames[0], "KEYS[1] routes every call")
	assert.Equal(t, []string{"ob", "oe"}, shardKeyNames[len(shardKeyNames)-2:], "the outbox's keys come last")
}

var luacheckLine = regexp.MustCompile(`^(.+?):(\d+):(\d+): (.*)$`)

// luacheck passes on every script as Redis runs it: its prelude and its
// own file, assembled. A warning in a prelude counts once every script
// that has the prelude has it: a local the prelude defines for some
// scripts is unused in the others.
func TestLuacheck(t *testing.T) {
	bin, err := exec.LookPath("luacheck")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("luacheck not found and CI is set: install it (apt-get install lua-check): %v", err)
		}
		t.Skip("luacheck not found; install it (apt-get install lua-check) to check the Lua scripts")
	}
	rc, err := filepath.Abs("lua/.luacheckrc")
	require.NoError(t, err)
	dir := t.TempDir()
	byName := map[string]*luaScript{}
	having := map[string]int{} // file -> how many scripts have it
	var paths []string
	for _, s := range allLuaScripts() {
		byName[s.name] = s
		for _, p := range s.parts {
			having[p.file]++
		}
		path := filepath.Join(dir, s.name)
		require.NoError(t, os.WriteFile(path, []byte(s.src), 0o644))
		paths = append(paths, path)
	}
	cmd := exec.Command(bin, append([]string{"--config", rc, "--codes", "--formatter", "plain"}, paths...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if code := cmd.ProcessState.ExitCode(); code > 2 { // 1: warnings, 2: syntax errors, both listed
		t.Fatalf("luacheck failed (exit %d: %v): %s", code, err, out)
	}
	seen := map[string]int{} // warning, at its file and line -> how many scripts have it
	var order []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		m := luacheckLine.FindStringSubmatch(line)
		require.NotNil(t, m, "luacheck said %q", line)
		s := byName[filepath.Base(m[1])]
		require.NotNil(t, s, "luacheck said %q", line)
		n, _ := strconv.Atoi(m[2])
		file, at := s.where(n)
		w := luaDir + file + ":" + strconv.Itoa(at) + ":" + m[3] + ": " + m[4]
		if seen[w] == 0 {
			order = append(order, w)
		}
		seen[w]++
	}
	for _, w := range order {
		file := strings.TrimPrefix(w[:strings.Index(w, ".lua:")+4], luaDir)
		if seen[w] == having[file] {
			t.Error(w)
		}
	}
}

// An error a script raises names the file of lua/ and the line in it, and
// the script when the line is in its prelude; it is still Redis's error.
func TestLuaScriptErrorNamesFileAndLine(t *testing.T) {
	c := startRedis(t).client(t)
	k := newShardKeys("t", 0)
	lineOf := func(file, text string) int {
		for i, l := range strings.Split(luaFile(file), "\n") {
			if strings.Contains(l, text) {
				return i + 1
			}
		}
		t.Fatalf("%s has no line %q", file, text)
		return 0
	}
	minute := time.Minute.Milliseconds()
	cases := []struct {
		name   string
		run    func() *redis.Cmd
		prefix string // the script named first, when the line is in its prelude
		file   string
		text   string // the line that raises
	}{
		{"a prelude's line", func() *redis.Cmd {
			return setScript.Run(context.Background(), c, k.keys, k.tag, "n", "not a ttl", minute, 0, 1, minute, "w", 1, 1, "")
		}, "cluster/lua/set.lua: ", "prelude_presence.lua", "redis.call('ZADD', K('alive'), now + ttl, node)"},
		{"the script's own line", func() *redis.Cmd {
			return claimScript.Run(context.Background(), c, k.keys, k.tag, "claimer", minute, 100, minute, 0, minute, 0, 1,
				minute, "a", 1, 1, "", "", "dead", 1, "not a time")
		}, "", "claim.lua", "if at < now - seenTTL or"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run().Err()
			require.Error(t, err)
			at := luaDir + tc.file + ":" + strconv.Itoa(lineOf(tc.file, tc.text))
			assert.True(t, strings.HasPrefix(err.Error(), tc.prefix+"ERR "+at+": "), "%v", err)
			assert.Contains(t, err.Error(), "@"+at+".")
			assert.NotContains(t, err.Error(), "user_script")
			_, isRedis := err.(interface{ RedisError() })
			assert.False(t, isRedis, "the error is the explained one")
			var rerr redis.Error
			assert.ErrorAs(t, err, &rerr, "it wraps Redis's error")
		})
	}
}
