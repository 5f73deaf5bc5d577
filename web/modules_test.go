package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/web"
)

// TestModulesInBrowser runs the page's pure modules in Chromium, served by
// web.Handler alone (no presenced): formatting, user ID rules, the reconnect
// backoff and the ring drawing, including the cursor passing slot 0.
func TestModulesInBrowser(t *testing.T) {
	chromium := needChromium(t)
	mux := http.NewServeMux()
	mux.Handle("/", web.Handler())
	// An empty page of the same origin, so module imports are allowed.
	mux.HandleFunc("/blank", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><title>t</title><link rel="icon" href="/favicon.svg"><svg id="r" viewBox="-140 -140 280 280"></svg>`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	b := startBrowser(t, chromium)
	do(t, b.ctx, "open", chromedp.Navigate(srv.URL+"/blank"))
	run := func(t *testing.T, js string, v any) {
		t.Helper()
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](js, chromedp.EvalAwaitPromise))
		require.NoError(t, err, js)
		require.NoError(t, json.Unmarshal(raw, v), "%s returned %s", js, raw)
	}

	t.Run("fmtDur", func(t *testing.T) {
		cases := map[float64]string{
			0: "0 ms", 100: "100 ms", 994: "990 ms", 1000: "1.0 s", 2000: "2.0 s", 2100: "2.1 s",
			9949: "9.9 s", 15000: "15 s", 30000: "30 s", 59400: "59 s", 60000: "1 min", 65000: "1 min 5 s", -5: "0 ms",
		}
		for in, want := range cases {
			var got string
			run(t, `import('/format.js').then(m => m.fmtDur(`+jsNum(in)+`))`, &got)
			assert.Equal(t, want, got, "fmtDur(%v)", in)
		}
	})

	t.Run("validUid", func(t *testing.T) {
		cases := map[string]bool{
			"alice": true, "a": true, "bob_1.x-y@host": true, "guest-0a9z": true,
			"": false, "with space": false, "é": false, "a/b": false, "<b>": false,
		}
		long := ""
		for range 64 {
			long += "x"
		}
		cases[long] = true
		cases[long+"x"] = false
		for in, want := range cases {
			var got bool
			run(t, `import('/format.js').then(m => m.validUid(`+q(in)+`))`, &got)
			assert.Equal(t, want, got, "validUid(%q)", in)
		}
		var tags []string
		run(t, `import('/format.js').then(m => Array.from({length: 50}, () => m.randomTag()))`, &tags)
		for _, tag := range tags {
			assert.Regexp(t, `^[0-9a-z]{4}$`, tag)
		}
	})

	t.Run("backoff", func(t *testing.T) {
		// Attempt n waits between half and all of min(15 s, 0.5 s * 2^n).
		var got [][2]float64
		run(t, `import('/conn.js').then(m => Array.from({length: 12}, (_, n) => {
			let lo = Infinity, hi = 0;
			for (let i = 0; i < 200; i++) { const d = m.backoffDelay(n); lo = Math.min(lo, d); hi = Math.max(hi, d); }
			return [lo, hi];
		}))`, &got)
		require.Len(t, got, 12)
		for n, r := range got {
			base := min(15000, 500*float64(int(1)<<n))
			assert.GreaterOrEqual(t, r[0], base/2, "attempt %d", n)
			assert.LessOrEqual(t, r[1], base, "attempt %d", n)
			assert.Greater(t, r[1]-r[0], base/10, "attempt %d is jittered", n)
		}
	})

	t.Run("socketURL", func(t *testing.T) {
		var got string
		run(t, `import('/conn.js').then(m => m.socketURL({uid: 'a b&c'}))`, &got)
		assert.Equal(t, "ws"+srv.URL[len("http"):]+"/ws?uid=a+b%26c", got)
	})

	t.Run("ring", func(t *testing.T) {
		// Three readings: the cursor steps 29 -> 30 -> 0 (a new turn) on a 31-slot ring.
		var got []struct {
			Slots, Counts, Due int
			Cursor, Total      string
			Rotate             string
			Labels             []string
		}
		run(t, `import('/ring.js').then(m => {
			const svg = document.getElementById('r');
			const v = new m.RingView(svg);
			const due = Array(31).fill(0); due[0] = 2; due[5] = 1; due[30] = 4;
			return [29, 30, 0].map(c => {
				v.update({slots: 31, tick_ms: 1000, cursor: c, due});
				return {
					slots: svg.querySelectorAll('.slot').length,
					counts: svg.querySelectorAll('.count').length,
					due: svg.querySelectorAll('.slot.due').length,
					cursor: svg.dataset.cursor, total: svg.dataset.total,
					rotate: svg.querySelector('.hand').style.transform,
					labels: [...svg.querySelectorAll('.count')].map(t => t.textContent).filter(Boolean),
				};
			});
		})`, &got)
		require.Len(t, got, 3)
		for _, g := range got {
			assert.Equal(t, 31, g.Slots)
			assert.Equal(t, 31, g.Counts)
			assert.Equal(t, 3, g.Due)
			assert.Equal(t, "7", g.Total)
			assert.Equal(t, []string{"2", "1", "4"}, g.Labels)
		}
		assert.Equal(t, []string{"29", "30", "0"}, []string{got[0].Cursor, got[1].Cursor, got[2].Cursor})
		// Clockwise through slot 0: 360 degrees, not back to 0.
		assert.Equal(t, []string{"rotate(336.774deg)", "rotate(348.387deg)", "rotate(360deg)"},
			[]string{got[0].Rotate, got[1].Rotate, got[2].Rotate})
	})

	assert.Empty(t, b.errors(), "console errors or exceptions")
}

func jsNum(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}
