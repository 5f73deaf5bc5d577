package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestE2ECrossOrigin: a page on another origin (another port of loopback)
// imports the client from presenced's /presenced.js, connects with a token
// and goes live, and sends a heartbeat with Authorization: Bearer, which
// needs a preflight, when presenced lists its origin in -origins; the same
// page on an origin not listed can do neither, as the browser enforces.
func TestE2ECrossOrigin(t *testing.T) {
	chromium := needChromium(t)
	const secret, apiKey = "e2e-cors-secret", "e2e-cors-key"

	// Both pages are empty: everything they do comes from presenced.
	blank := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><title>another app</title><link rel="icon" href="data:,">`))
	})
	allowed, refused := httptest.NewServer(blank), httptest.NewServer(blank)
	t.Cleanup(allowed.Close)
	t.Cleanup(refused.Close)
	srv := startPresenced(t, "-slots", strconv.Itoa(e2eSlots), "-tick", e2eTick.String(),
		"-jwt-secret", secret, "-api-key", apiKey, "-origins", allowed.URL)
	sign := func(sub string) string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(secret))
		require.NoError(t, err)
		return tok
	}
	online := func(uid string) bool {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/api/presence/"+uid, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "apikey "+apiKey)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		var p presenceOne
		require.NoError(t, json.NewDecoder(res.Body).Decode(&p))
		return p.Online
	}
	// await evaluates a promise in the page and returns what it resolves to.
	await := func(t *testing.T, ctx context.Context, js string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, e2eWait)
		defer cancel()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
		require.NoError(t, err, js)
		return v
	}
	importClient := `import(` + q(srv.URL+"/presenced.js") + `).then(m => { window.client = m; return 'loaded'; }, e => 'failed: ' + e)`
	heartbeat := func(tok string) string {
		return `fetch(` + q(srv.URL+"/api/heartbeat") + `, {method: 'POST', headers: {Authorization: 'Bearer ' + ` + q(tok) + `}})` +
			`.then(r => 'status ' + r.status, e => 'failed: ' + e)`
	}

	b := startBrowser(t, chromium)
	t.Run("allowed origin", func(t *testing.T) {
		page := b.ctx
		do(t, page, "open the page", chromedp.Navigate(allowed.URL+"/"))
		require.Equal(t, "loaded", await(t, page, importClient), "the module import from an allowed origin")

		ws := "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws"
		await(t, page, `(async () => {
			window.p = new window.client.Presenced({url: `+q(ws)+`, token: `+q(sign("cors-erin"))+`, channels: ['lobby']});
			window.states = [];
			p.addEventListener('state', e => states.push(e.detail.state));
			return 'started';
		})()`)
		waitJS(t, page, "the client live, in the lobby", `window.p.state === 'live' && window.p.channel('lobby').members.has('cors-erin')`, e2eWait)
		assert.True(t, online("cors-erin"), "the server counts the socket")

		assert.Equal(t, "status 204", await(t, page, heartbeat(sign("cors-hb"))), "a heartbeat with a Bearer token, after its preflight")
		assert.True(t, online("cors-hb"), "the heartbeat reached the server")
		assert.NotContains(t, eval[[]string](t, page, `window.states`), "closed")
	})

	t.Run("origin not allowed", func(t *testing.T) {
		page := b.tab("not allowed")
		do(t, page, "open the page", chromedp.Navigate(refused.URL+"/"))
		assert.True(t, strings.HasPrefix(await(t, page, importClient), "failed: "), "the module import from an origin not allowed")
		assert.True(t, strings.HasPrefix(await(t, page, heartbeat(sign("cors-mallory"))), "failed: "), "the heartbeat's preflight is refused")
		assert.False(t, online("cors-mallory"), "the heartbeat never went out")
	})

	// The allowed page logged nothing; the other only the browser's CORS
	// refusals of the two requests.
	var unexpected []string
	for _, e := range b.errors() {
		if strings.HasPrefix(e, "not allowed: ") && (strings.Contains(e, "CORS policy") || strings.Contains(e, "net::ERR_FAILED")) {
			t.Logf("expected: %s", e)
			continue
		}
		unexpected = append(unexpected, e)
	}
	assert.Empty(t, unexpected, "console errors or exceptions")
}
