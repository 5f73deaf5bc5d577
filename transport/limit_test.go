package transport

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The flood cut by window, at the default limits: how long a sending
// pattern lasts before the connection is cut, if it is.
func TestFloodCutByWindow(t *testing.T) {
	l := limits{frameRate: DefaultFrameRate, frameBurst: DefaultFrameBurst, byteRate: DefaultByteRate, byteBurst: 16 * DefaultByteRate}
	start := time.Unix(1_700_000_000, 0)
	// run sends at perSecond frames a second for up to d, plus an opening
	// burst, and returns when the connection was cut (or -1).
	run := func(burst int, perSecond float64, d time.Duration) time.Duration {
		var st rateState
		for i := range burst {
			if st.check(&l, start, 10) == cutOff {
				t.Logf("cut in the opening burst, at frame %d", i)
				return 0
			}
		}
		if perSecond == 0 {
			return -1
		}
		step := time.Duration(float64(time.Second) / perSecond)
		for at := step; at <= d; at += step {
			if st.check(&l, start.Add(at), 10) == cutOff {
				return at
			}
		}
		return -1
	}
	for _, tc := range []struct {
		name      string
		burst     int
		perSecond float64
		cutBefore time.Duration // 0: never cut
	}{
		{"at the rate", 0, DefaultFrameRate, 0},
		{"one burst of burst+100 frames", DefaultFrameBurst + 100, 0, 0},
		{"that burst, then the rate", DefaultFrameBurst + 100, DefaultFrameRate, 0},
		{"1.5x the rate", 0, 1.5 * DefaultFrameRate, 0},
		{"2x the rate", 0, 2 * DefaultFrameRate, 10 * time.Second},
		{"20x the rate", 0, 20 * DefaultFrameRate, 3 * time.Second},
		{"a burst of 2,000", 2000, 0, time.Nanosecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cut := run(tc.burst, tc.perSecond, 60*time.Second)
			if tc.cutBefore == 0 {
				assert.Equal(t, time.Duration(-1), cut, "never cut")
				return
			}
			assert.GreaterOrEqual(t, cut, time.Duration(0), "cut")
			assert.Less(t, cut, tc.cutBefore)
		})
	}
}
