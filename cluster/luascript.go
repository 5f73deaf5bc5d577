package cluster

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// luaFiles holds the scripts' sources. Each file's header says what it
// does, its KEYS and ARGV; lua/prelude_keys.lua lays out a shard's keys.
//
//go:embed lua/*.lua
var luaFiles embed.FS

// luaDir is where the files are in the repository, as errors name them.
const luaDir = "cluster/lua/"

// A luaScript is a Redis script assembled from files of lua/: a prelude,
// whose top-level locals the script uses, then the script's own file.
// Redis knows it as one chunk, so its errors count lines of the whole
// (user_script:N); explain names the file and the line in it instead.
// Run explains its errors itself; after EvalSha or Eval in a pipeline, the
// caller calls explain.
type luaScript struct {
	*redis.Script
	name  string // the script's own file
	src   string
	parts []luaPart
}

// A luaPart is one file of a script, from line first of the whole.
type luaPart struct {
	file         string
	first, lines int
}

// newLuaScript assembles the files of prelude, in order, then file. A
// missing file panics: they are embedded, so that is a mistake in the
// code, found by any test.
func newLuaScript(prelude []string, file string) *luaScript {
	s := &luaScript{name: file}
	var src strings.Builder
	line := 1
	for _, f := range slices.Concat(prelude, []string{file}) {
		text := luaFile(f)
		n := strings.Count(text, "\n")
		s.parts = append(s.parts, luaPart{f, line, n})
		line += n
		src.WriteString(text)
	}
	s.src = src.String()
	s.Script = redis.NewScript(s.src)
	return s
}

// luaFile reads a file of lua/, ending it with a newline so that the next
// file starts on a line of its own.
func luaFile(name string) string {
	b, err := luaFiles.ReadFile("lua/" + name)
	if err != nil {
		panic(fmt.Sprintf("cluster: read Lua script: %v", err))
	}
	text := string(b)
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	return text
}

// Run runs s as redis.Script.Run does, its error explained.
func (s *luaScript) Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	cmd := s.Script.Run(ctx, c, keys, args...)
	s.explainCmd(cmd)
	return cmd
}

// explainCmd explains cmd's error (see explain).
func (s *luaScript) explainCmd(cmd *redis.Cmd) {
	if err := cmd.Err(); err != nil {
		if e := s.explain(err); e != err {
			cmd.SetErr(e)
		}
	}
}

var (
	scriptLine = regexp.MustCompile(`user_script:(\d+)`)
	scriptSHA  = regexp.MustCompile(`script: ([0-9a-f]{40})`)
)

// explain rewrites an error Redis returned running s so that it names the
// file of lua/ and the line in it where Redis names a line of the whole,
// and the script first when that is in another file (a prelude's). An
// error of another script (Redis names it by its SHA), or with no line,
// is returned as it is.
func (s *luaScript) explain(err error) error {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return err
	}
	msg := err.Error()
	if !strings.Contains(msg, "user_script:") {
		return err
	}
	if m := scriptSHA.FindStringSubmatch(msg); m != nil && m[1] != s.Hash() {
		return err
	}
	own := true
	msg = scriptLine.ReplaceAllStringFunc(msg, func(at string) string {
		n, _ := strconv.Atoi(strings.TrimPrefix(at, "user_script:"))
		file, line := s.where(n)
		own = own && file == s.name
		return luaDir + file + ":" + strconv.Itoa(line)
	})
	if !own {
		msg = luaDir + s.name + ": " + msg
	}
	return &scriptError{msg: msg, err: err}
}

// where returns the file and the line in it of line n of s.
func (s *luaScript) where(n int) (file string, line int) {
	for _, p := range s.parts {
		if n < p.first+p.lines {
			return p.file, max(1, n-p.first+1)
		}
	}
	p := s.parts[len(s.parts)-1] // past the end: a compile error at the end of the source
	return p.file, n - p.first + 1
}

// A scriptError is an error Redis returned running a luaScript, its
// positions named as lines of the script's files. It wraps Redis's error,
// so errors.As still finds a redis.Error.
type scriptError struct {
	msg string
	err error
}

func (e *scriptError) Error() string { return e.msg }
func (e *scriptError) Unwrap() error { return e.err }

// luaKeyNames reads the names of a shard's keys, in their order as KEYS,
// from lua/prelude_keys.lua.
func luaKeyNames() []string {
	m := regexp.MustCompile(`ipairs\(\{'([^}]*)'\}\) do KEY\[name\] = KEYS\[i\] end`).FindStringSubmatch(luaFile("prelude_keys.lua"))
	if m == nil {
		panic("cluster: lua/prelude_keys.lua lists no keys")
	}
	return strings.Split(m[1], "', '")
}
