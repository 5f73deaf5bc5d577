package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// killPost is one POST of events "id:type:key" (key uid or uid@channel),
// accepted (204) or refused (503), at seconds from t0.
func killPost(at float64, status int, evs ...string) post {
	p := post{got: sec(at), id: fmt.Sprintf("msg_%v", at), status: status, body: strings.Join(evs, " ")}
	for i, ev := range evs {
		f := strings.Split(ev, ":")
		uid, ch, _ := strings.Cut(f[2], "@")
		p.events = append(p.events, event{ID: f[0], Type: f[1], UID: uid, Channel: ch, At: sec(at).UnixMilli() + int64(i)})
	}
	return p
}

func TestKilledCheck(t *testing.T) {
	ons := []string{"1:online:k000", "2:join:k000@ch0", "3:online:k001", "4:join:k001@ch1"}
	offs := []string{"5:leave:k000@ch0", "6:offline:k000", "7:leave:k001@ch1", "8:offline:k001"}
	tests := []struct {
		name          string
		posts         []post
		lateOn, again int
		problems      []string
	}{
		{"A sent the onlines", []post{killPost(1, 204, ons...), killPost(5, 204, offs...)}, 0, 0, nil},
		{"the claimer sent them", []post{killPost(5, 204, append(ons, offs...)...)}, 2, 0, nil},
		{"both did, under the same ids", []post{killPost(1, 204, ons...), killPost(5, 204, append(ons, offs...)...)}, 0, 4, nil},
		{"a refused POST counts for nothing", []post{killPost(1, 503, ons...), killPost(5, 204, offs...)}, 0, 0,
			[]string{"k000: edges [offline], want [online offline]", "k000@ch0: edges [leave], want [join leave]",
				"k001: edges [offline]", "k001@ch1: edges [leave]"}},
		{"an online sent again under a new id", []post{killPost(1, 204, ons...), killPost(5, 204, append([]string{"9:online:k000"}, offs...)...)}, 1, 0,
			[]string{"k000: edges [online online offline]"}},
		{"no offline", []post{killPost(1, 204, ons...), killPost(5, 204, offs[:2]...)}, 0, 0,
			[]string{"k001: edges [online], want [online offline]", "k001@ch1: edges [join], want [join leave]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := &killed{users: 2, signal: sec(3), exit: sec(3)}
			k.check(tt.posts)
			assert.Equal(t, tt.lateOn, k.lateOn, "onlines first delivered after the kill")
			assert.Equal(t, tt.again, k.repeatedID, "ids repeated")
			require.Len(t, k.problems, len(tt.problems), "%q", k.problems)
			for i, p := range tt.problems {
				assert.Contains(t, k.problems[i], p)
			}
		})
	}
}

// killSeeds are the seeds CI runs the kill right after connects with:
// delays of 27, 9 and 12 ms.
var killSeeds = []uint64{1, 2, 3}

// The kill right after connects, at process level: 100 users connect to
// node A of three, A is SIGKILLed 0-50 ms after the last welcome, and
// every user's online and join reach the webhook once, then its offline
// and leave, whether A delivered them or its claimer took them over.
func TestKillRightAfterConnects(t *testing.T) {
	ctx, bin, server, cli := processes(t, "starts Redis and three nodes per seed", 5*time.Minute)
	for _, seed := range killSeeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			cfg := config{seed: seed, bin: bin, redis: server, redisCLI: cli, dir: t.TempDir(), logf: t.Logf}
			k, err := killAfterConnects(ctx, cfg, 100)
			require.NoError(t, err)
			if len(k.problems) > 0 {
				t.Errorf("go run ./faults -kill-after-connects 100 -seed %d:\n%s", seed, k)
			} else {
				t.Log(k)
			}
			assert.LessOrEqual(t, k.signal.Sub(k.lastIn), maxKillDelay+20*time.Millisecond, "the SIGKILL came late")
		})
	}
}
