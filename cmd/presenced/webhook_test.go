package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// receiver is a backend's webhook endpoint: it checks each POST's signature
// and keeps the events in the order they came.
type receiver struct {
	t      *testing.T
	secret string

	mu     sync.Mutex
	events []string // "type uid channel"
	posts  int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if !assert.NoError(rc.t, err) {
		return
	}
	mac := hmac.New(sha256.New, []byte(rc.secret))
	mac.Write(body)
	assert.Equal(rc.t, "sha256="+hex.EncodeToString(mac.Sum(nil)), r.Header.Get("X-Presenced-Signature"))
	// Standard Webhooks: a raw secret keys the HMAC of id.timestamp.body.
	id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
	assert.NotEmpty(rc.t, id, "webhook-id")
	assert.NotEmpty(rc.t, ts, "webhook-timestamp")
	mac = hmac.New(sha256.New, []byte(rc.secret))
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	assert.Equal(rc.t, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)), r.Header.Get("webhook-signature"))
	assert.Equal(rc.t, "application/json", r.Header.Get("Content-Type"))
	var batch struct {
		Events []struct {
			Type, UID, Channel string
			At                 int64
		}
	}
	if !assert.NoError(rc.t, json.Unmarshal(body, &batch)) {
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.posts++
	for _, e := range batch.Events {
		assert.Greater(rc.t, e.At, time.Now().Add(-time.Minute).UnixMilli())
		rc.events = append(rc.events, e.Type+" "+e.UID+" "+e.Channel)
	}
}

func (rc *receiver) got() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.events...)
}

// The server POSTs the edges it produced to -webhook, signed with
// -webhook-secret, as they happened: away and back included, and the last
// user's offline on shutdown.
func TestWebhookGetsEveryEdgeInOrder(t *testing.T) {
	rc := &receiver{t: t, secret: "hook-secret"}
	backend := httptest.NewServer(rc)
	// After the server's own cleanup, which shuts it down: alice, still
	// connected then, went offline last.
	t.Cleanup(func() {
		if got := rc.got(); assert.NotEmpty(t, got) {
			assert.Equal(t, "offline alice ", got[len(got)-1], "delivered before the server exited")
		}
		backend.Close()
	})
	// A 3 s timeout: nobody should time out while a busy machine runs the test.
	addr, out := startRun(t, []string{"-slots", "31", "-tick", "100ms", "-webhook", backend.URL + "/presence"},
		map[string]string{"PRESENCED_WEBHOOK_SECRET": "hook-secret"})

	dial := func(uid string) *websocket.Conn {
		ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws?uid="+uid+"&channels=lobby", nil)
		require.NoError(t, err)
		for _, want := range []string{"welcome", "joined"} { // connected and counted
			var f struct{ Type string }
			require.NoError(t, ws.ReadJSON(&f))
			require.Equal(t, want, f.Type)
		}
		go func() { // answers the server's pings, so the user stays online while the test waits
			for {
				if _, _, err := ws.NextReader(); err != nil {
					return
				}
			}
		}()
		return ws
	}
	dial("alice")
	bob := dial("bob")
	require.NoError(t, bob.WriteMessage(websocket.TextMessage, []byte(`{"type":"activity","state":"away"}`)))
	require.NoError(t, bob.WriteMessage(websocket.TextMessage, []byte(`{"type":"activity","state":"active"}`)))
	require.NoError(t, bob.WriteMessage(websocket.TextMessage, []byte(`{"type":"leave","channel":"lobby"}`)))
	require.Eventually(t, func() bool { return len(rc.got()) >= 7 }, waitLong, 10*time.Millisecond, "%s", out)
	assert.Equal(t, []string{
		"online alice ", "join alice lobby",
		"online bob ", "join bob lobby", "away bob ", "active bob ", "leave bob lobby",
	}, rc.got())
	require.NoError(t, bob.Close())
	require.Eventually(t, func() bool { return len(rc.got()) >= 8 }, waitLong, 10*time.Millisecond)
	assert.Equal(t, "offline bob ", rc.got()[7])
}

// A -webhook-secret of the whsec_ form whose key is not base64 stops the
// server at startup, naming the flag, or the variable it came from, and not
// the secret.
func TestWebhookSecretNotBase64(t *testing.T) {
	for _, env := range []map[string]string{nil, {"PRESENCED_WEBHOOK_SECRET": "whsec_not*base64"}} {
		args := []string{"-webhook", "http://127.0.0.1:9/hook"}
		want := "$PRESENCED_WEBHOOK_SECRET: webhook: Secret"
		if env == nil {
			args = append(args, "-webhook-secret", "whsec_not*base64")
			want = "presenced: -webhook-secret: webhook: Secret"
		}
		var out bytes.Buffer
		code := run(context.Background(), args, func(k string) string { return env[k] }, &out, &out)
		assert.Equal(t, 2, code, out.String())
		assert.Contains(t, out.String(), want)
		assert.NotContains(t, out.String(), "not*base64", "the secret in the error")
		assert.NotContains(t, out.String(), "listening")
	}
}
