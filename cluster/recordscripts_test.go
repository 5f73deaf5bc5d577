package cluster

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordRun runs recordScript on one shard with changes, at the node's
// clock now, and returns the records it changed, in order.
func recordRun(t *testing.T, e *Engine, uid string, now time.Time, change ...any) []string {
	t.Helper()
	k := e.keys[e.shard(uid)]
	args := append([]any{k.tag, int64(time.Hour / time.Millisecond), now.UnixMilli()}, change...)
	vals, err := scriptResult(recordScript.Run(context.Background(), e.rdb, k.keys, args...), 0)
	require.NoError(t, err)
	var out []string
	for i := 0; i+recordValues <= len(vals); i += recordValues {
		out = append(out, vals[i+1].(string))
	}
	return out
}

// The record script applies sets whole, in order, the last one winning;
// one that changes nothing publishes nothing; an expiry clears only the
// note it names, only once its until passed, and only once.
func TestRecordScriptSetsAndExpiries(t *testing.T) {
	srv := startRedis(t)
	e, err := New(testConfig(srv.client(t), "a"))
	require.NoError(t, err)
	t.Cleanup(e.crash)
	set(t, e.rdb, e.keys[e.shard("alice")], "a", time.Minute, "u", "alice", 1) // online: the record is live
	now := time.Now()
	until := now.Add(time.Minute).UnixMilli()
	note := `{"text":"x","until":` + strconv.FormatInt(until, 10) + `}`

	assert.Equal(t, []string{`{"mode":"dnd"}`, `{"mode":"dnd","note":` + note + `}`, `{"info":{"n":1},"mode":"dnd","note":` + note + `}`},
		recordRun(t, e, "alice", now, "s", "alice", "dnd", 0, "", "s", "alice", "", 1, note, "s", "alice", "dnd", 0, "", "i", "alice", `{"n":1}`),
		"the repeated dnd changed nothing")
	assert.Empty(t, recordRun(t, e, "alice", now, "x", "alice", until), "not yet")
	assert.Empty(t, recordRun(t, e, "alice", now.Add(2*time.Minute), "x", "alice", until+1), "another note")
	later := now.Add(2 * time.Minute)
	assert.Equal(t, []string{`{"info":{"n":1},"mode":"dnd"}`}, recordRun(t, e, "alice", later, "x", "alice", until, "x", "alice", until),
		"cleared once")
	assert.Equal(t, []string{`{"info":{"n":1}}`}, recordRun(t, e, "alice", later, "s", "alice", "online", 0, ""))

	// A put-back applies only to a user with no record.
	assert.Empty(t, recordRun(t, e, "alice", later, "p", "alice", `{"n":2}`, "invisible", "", 0))
	assert.Equal(t, []string{`{"mode":"invisible"}`}, recordRun(t, e, "bob", later, "p", "bob", "", "invisible", "", 0))
}
