package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// MembersAfter pages through a channel's members from Redis in the order Go
// sorts strings (bytes), whatever characters the IDs use, from any
// starting point, and counts all of them on every page.
func TestMembersAfterPagesInOrder(t *testing.T) {
	srv := startRedis(t)
	a := startNode(t, testConfig(srv.client(t), "a"))
	b := startNode(t, testConfig(srv.client(t), "b"))
	var want []string
	for i := range 1234 {
		// IDs use every kind of character an ID may have, so their
		// order is bytes' order, not a locale's.
		uid := fmt.Sprintf("%c%03d%c", "-.0@A_a"[i%7], i, "zZ9_.@-"[i%5])
		want = append(want, uid)
		if i%2 == 0 {
			a.SetMember("lobby", uid, 1)
		} else {
			b.SetMember("lobby", uid, 1)
		}
	}
	slices.Sort(want)
	ctx := context.Background()
	eventually(t, "every membership written", func(c *assert.CollectT) {
		count, _, err := a.MembersAfter(ctx, "lobby", "", 1)
		assert.NoError(c, err)
		assert.Equal(c, len(want), count)
	})

	for _, limit := range []int{1000, 97} {
		var got []string
		for after := ""; ; {
			count, page, err := a.MembersAfter(ctx, "lobby", after, limit)
			require.NoError(t, err)
			assert.Equal(t, len(want), count)
			require.LessOrEqual(t, len(page), limit)
			if len(page) == 0 {
				break
			}
			got = append(got, page...)
			after = page[len(page)-1]
		}
		assert.Equal(t, want, got, "limit %d", limit)
	}

	for _, tc := range []struct {
		after string
		want  []string
	}{
		{"", want[:3]},
		{want[10], want[11:14]},
		{want[10] + "0", want[11:14]}, // between two members
		{want[len(want)-2], want[len(want)-1:]},
		{want[len(want)-1], []string{}},
		{"zzz", []string{}},
	} {
		_, page, err := b.MembersAfter(ctx, "lobby", tc.after, 3)
		require.NoError(t, err)
		assert.Equal(t, tc.want, page, "after %q", tc.after)
	}

	count, page, err := a.MembersAfter(ctx, "nobody-here", "", 10)
	require.NoError(t, err)
	assert.Zero(t, count)
	assert.Equal(t, []string{}, page)
	count, page, err = a.MembersAfter(ctx, "lobby", "", 0)
	require.NoError(t, err)
	assert.Equal(t, len(want), count, "limit 0 counts")
	assert.Empty(t, page)

	srv.kill()
	_, _, err = a.MembersAfter(ctx, "lobby", "", 10)
	assert.ErrorContains(t, err, `cluster: page members of "lobby"`)
}
