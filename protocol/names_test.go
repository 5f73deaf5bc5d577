package protocol

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestValidUID(t *testing.T) {
	for _, tc := range []struct {
		uid string
		ok  bool
	}{
		{"a", true},
		{"alice", true},
		{"A_b.c-d@e", true},
		{"0123456789", true},
		{strings.Repeat("z", 64), true},
		{"", false},
		{strings.Repeat("z", 65), false},
		{"a b", false},
		{"a/b", false},
		{"a+b", false},
		{"é", false},
		{"a\x00", false},
		{"<script>", false},
	} {
		assert.Equal(t, tc.ok, ValidUID(tc.uid), "%q", tc.uid)
	}
}

func TestValidChannel(t *testing.T) {
	for name, ok := range map[string]bool{
		"lobby": true, "a": true, "room-1_x.y:z@w/v#u": true, strings.Repeat("c", 128): true,
		strings.Repeat("c", 129): false, string(make([]byte, 128)): false,
		"": false, "a b": false, "é": false, "a,b": false, "x?": false,
	} {
		assert.Equal(t, ok, ValidChannel(name), "%q", name)
	}
}

func TestTruncate(t *testing.T) {
	assert.Equal(t, "short", Truncate("short"))
	assert.Equal(t, strings.Repeat("x", 32)+"...", Truncate(strings.Repeat("x", 40)))
}
