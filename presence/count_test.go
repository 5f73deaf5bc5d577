package presence

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A group's count, as a viewer sees it, leaves out the invisible members
// but the viewer itself.
func TestCountSeen(t *testing.T) {
	for _, tc := range []struct {
		name   string
		viewer string
		hidden []string
		want   int
	}{
		{"no one hidden", "", nil, 5},
		{"a client without a user", "", []string{"x", "y"}, 3},
		{"another user", "alice", []string{"x", "y"}, 3},
		{"an invisible user counts itself", "x", []string{"x", "y"}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, countSeen(tc.viewer, 5, slices.Values(tc.hidden)))
		})
	}
}
