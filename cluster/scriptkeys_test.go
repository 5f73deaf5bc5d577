package cluster

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every key a script touches is one of its KEYS: each call names its key
// through K (the shard's keys, declared in order) or KEYS[1]; a key built
// from ARGV would still run on Redis, and break on a proxy or a store that
// routes or locks by KEYS.
func TestScriptsTouchOnlyDeclaredKeys(t *testing.T) {
	src, err := os.ReadFile("scripts.go")
	require.NoError(t, err)
	calls := regexp.MustCompile(`redis\.call\('([A-Z]+)'(?:, (K\([^)]*\)|[^,)]+))?`).FindAllStringSubmatch(string(src), -1)
	require.NotEmpty(t, calls)
	for _, c := range calls {
		cmd, key := c[1], c[2]
		switch cmd {
		case "TIME":
			assert.Empty(t, key, c[0])
		case "SPUBLISH": // a Pub/Sub channel, not a key
		default:
			assert.Regexp(t, `^(K\(.+\)|KEYS\[1\])$`, key, "%s: its key is not declared", c[0])
		}
	}
	for _, name := range regexp.MustCompile(`K\('([a-z]+)'\)`).FindAllStringSubmatch(string(src), -1) {
		assert.True(t, slices.Contains(shardKeyNames, name[1]), "K('%s') is not a shard key", name[1])
	}
}
