package transport

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzSplitFrames checks the reading of a POST's body: the frames are its
// non-blank lines, in order, whole, without their line ends (\n or \r\n).
func FuzzSplitFrames(f *testing.F) {
	for _, seed := range []string{"", "\n", `{"type":"ping"}`, "{\"type\":\"ping\"}\r\n{\"type\":\"join\",\"channel\":\"a\"}\n", "\r", " \t\n\n\r\n", "a\rb\n\rc", "\xff\n\x00"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		frames := splitFrames(body)
		var want [][]byte
		for _, line := range bytes.Split(body, []byte("\n")) {
			line = bytes.TrimSuffix(line, []byte("\r"))
			if len(bytes.TrimSpace(line)) > 0 {
				want = append(want, line)
			}
		}
		require.Equal(t, want, frames)
		for _, fr := range frames {
			require.NotContains(t, string(fr), "\n")
		}
	})
}
