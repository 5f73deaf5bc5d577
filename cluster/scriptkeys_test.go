package cluster

import (
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every key a script touches is one of its KEYS: each call names its key
// through K (the shard's keys, declared in order), a local set from K, or
// KEYS[1]; a key built from ARGV would still run on Redis, and break on a
// proxy or a store that routes or locks by KEYS.
func TestScriptsTouchOnlyDeclaredKeys(t *testing.T) {
	call := regexp.MustCompile(`redis\.p?call\('([A-Z]+)'(?:, (K\([^)]*\)|[^,)]+))?(?:, (K\([^)]*\)|[^,)]+))?`)
	fromK := regexp.MustCompile(`(?m)^local (\w+) = K\(`)
	for _, s := range allLuaScripts() {
		// A script of a shard names its keys through K; one that runs alone
		// (publish.lua, settle.lua, time.lua) has KEYS[1] only.
		declared := `^K\(.+\)$`
		for _, m := range fromK.FindAllStringSubmatch(s.src, -1) {
			declared += `|^` + m[1] + `$`
		}
		if len(s.parts) == 1 {
			declared = `^KEYS\[1\]$`
		}
		calls := call.FindAllStringSubmatch(s.src, -1)
		require.NotEmpty(t, calls, s.name)
		for _, c := range calls {
			cmd, key := c[1], c[2]
			if cmd == "XINFO" || cmd == "XGROUP" {
				key = c[3] // after the subcommand
			}
			switch cmd {
			case "TIME":
				assert.Empty(t, key, "%s: %s", s.name, c[0])
			case "SPUBLISH": // a Pub/Sub channel, not a key
			default:
				assert.Regexp(t, declared, key, "%s: %s: its key is not declared", s.name, c[0])
			}
		}
		for _, name := range regexp.MustCompile(`K\('([a-z]+)'\)`).FindAllStringSubmatch(s.src, -1) {
			assert.True(t, slices.Contains(shardKeyNames, name[1]), "%s: K('%s') is not a shard key", s.name, name[1])
		}
	}
}
