package cluster

import (
	"encoding/base64"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCursorRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		c    logCursor
	}{
		{"one shard at the start", logCursor{epochs: 1, pos: []logPos{{}}}},
		{"shards near each other", logCursor{epochs: 0xdeadbeefcafe, pos: []logPos{
			{logID{1764000000000, 5005}, 123456}, {logID{1764000000900, 0}, 1}, {logID{0, 0}, 77}, {logID{1764000000001, 3}, 9}}}},
		{"extremes", logCursor{epochs: math.MaxUint64, pos: []logPos{
			{logID{math.MaxUint64, math.MaxUint64}, math.MaxUint64}, {logID{0, math.MaxUint64}, 0}}}},
		{"4096 shards", logCursor{epochs: 7, pos: make([]logPos, 4096)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.c.encode()
			got, err := decodeCursor(s, len(tc.c.pos))
			require.NoError(t, err, "cursor %q", s)
			assert.Equal(t, tc.c, got)
			_, err = base64.RawURLEncoding.DecodeString(s)
			require.NoError(t, err, "%q is base64url without padding", s)
			_, err = decodeCursor(s, len(tc.c.pos)+1)
			assert.ErrorIs(t, err, errCursorShards, "a cursor of %d shards read for %d", len(tc.c.pos), len(tc.c.pos)+1)
		})
	}
	// Sixteen shards of a busy log: short enough for a URL.
	c := logCursor{epochs: 42, pos: make([]logPos, 16)}
	for i := range c.pos {
		c.pos[i] = logPos{logID{1764000000000 + uint64(i)*397, uint64(i % 3)}, 1_000_000 + uint64(i)*31}
	}
	t.Logf("a cursor of 16 shards is %d characters", len(c.encode()))
	assert.Less(t, len(c.encode()), 160)
}

func TestCursorRefused(t *testing.T) {
	good := logCursor{epochs: 9, pos: []logPos{{logID{1764000000000, 1}, 2}, {logID{1764000000005, 0}, 3}}}.encode()
	raw, err := base64.RawURLEncoding.DecodeString(good)
	require.NoError(t, err)
	enc := base64.RawURLEncoding.EncodeToString
	cases := []struct{ name, cursor string }{
		{"empty bytes", ""},
		{"not base64url", "a+b/"},
		{"padded", good + "="},
		{"another version", enc(append([]byte{2}, raw[1:]...))},
		{"truncated", enc(raw[:len(raw)-1])},
		{"trailing byte", enc(append(append([]byte{}, raw...), 0))},
		{"no shards", enc([]byte{cursorVersion, 0})},
		{"a long varint", enc(append(append([]byte{}, raw[:len(raw)-1]...), raw[len(raw)-1]|0x80, 0))},
		{"not a cursor", "hello"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeCursor(tc.cursor, 2)
			assert.ErrorIs(t, err, errCursorShape)
		})
	}
}

// FuzzDecodeCursor: no string panics the decoder, and one it accepts is
// the only cursor of what it decodes to.
func FuzzDecodeCursor(f *testing.F) {
	f.Add(logCursor{epochs: 9, pos: []logPos{{logID{1764000000000, 1}, 2}, {logID{1764000000005, 0}, 3}}}.encode(), 2)
	f.Add(logCursor{epochs: 1, pos: make([]logPos, 16)}.encode(), 16)
	f.Add("AQI", 2)
	f.Add("", 1)
	f.Fuzz(func(t *testing.T, s string, shards int) {
		if shards < 1 || shards > 4096 {
			return
		}
		c, err := decodeCursor(s, shards)
		if err != nil {
			return
		}
		require.Len(t, c.pos, shards)
		require.Equal(t, s, c.encode())
	})
}
