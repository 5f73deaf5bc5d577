package transport_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/transport"
)

// An error frame names the channel of the frame it answers whenever that
// frame named one as a string, even when the frame could not be parsed: a
// client with several joins in flight tells which failed.
func TestErrorFrameNamesTheChannelAsSent(t *testing.T) {
	s := startServer(t, testConfig())
	ws, _ := s.dial(t, "alice")
	for _, tc := range []struct{ name, frame, channel, want string }{
		{"invalid name", `{"type":"join","channel":"a b"}`, "a b", "invalid channel name"},
		{"invalid name, leave", `{"type":"leave","channel":"no!"}`, "no!", "invalid channel name"},
		{"invalid name, chat", `{"type":"chat","channel":"x y","text":"hi"}`, "x y", "invalid channel name"},
		{"invalid name, typing", `{"type":"typing","channel":"é"}`, "é", "invalid channel name"},
		{"invalid name, members", `{"type":"members","channel":"a,b"}`, "a,b", "invalid channel name"},
		{"valid name, bad field", `{"type":"chat","channel":"lobby","text":""}`, "lobby", `non-empty "text"`},
		{"not a string", `{"type":"join","channel":5}`, "", `"channel"`},
		{"no channel", `{"type":"join"}`, "", `join needs a "channel"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			send(t, ws, tc.frame)
			f := readFrame(t, ws)
			assert.Equal(t, "error", f["type"])
			assert.Contains(t, f["error"], tc.want)
			if tc.channel == "" {
				assert.NotContains(t, f, "channel")
			} else {
				assert.Equal(t, tc.channel, f["channel"])
			}
		})
	}
}

// A publish or send body over 64 KiB is 413, not 400: it is not malformed,
// only too big. One at the limit goes through.
func TestAPIBodyOverLimitIs413(t *testing.T) {
	s := startServer(t, testConfig())
	body := func(field string, size int) string {
		head := fmt.Sprintf(`{%s,"data":"`, field)
		return head + strings.Repeat("x", size-len(head)-2) + `"}`
	}
	for _, tc := range []struct{ path, field string }{
		{"/api/publish", `"channel":"lobby"`},
		{"/api/send", `"uid":"bob"`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			code, msg := s.do(t, http.MethodPost, tc.path, body(tc.field, 64<<10), "")
			assert.Equal(t, http.StatusNoContent, code, msg)
			code, msg = s.do(t, http.MethodPost, tc.path, body(tc.field, 64<<10+1), "")
			assert.Equal(t, http.StatusRequestEntityTooLarge, code)
			assert.Contains(t, msg, "64 KiB")
			code, msg = s.do(t, http.MethodPost, tc.path, `{"data":1} {}`, "")
			assert.Equal(t, http.StatusBadRequest, code)
			assert.Contains(t, msg, "nothing after it")
		})
	}
}

// A GET of the socket's path without an upgrade (a browser's address bar,
// curl) is 426 with what to send, in whatever mode, not a refusal of an
// identity the caller never meant to give; one with a bad identity is
// refused for it, as an upgrade would be.
func TestPlainGetOfTheSocketIs426(t *testing.T) {
	jwt := testConfig()
	jwt.Auth = transport.JWTAuth([]byte("secret"))
	for _, tc := range []struct {
		name  string
		cfg   transport.Config
		query string
		says  string
	}{
		{"demo, no uid", testConfig(), "", "?uid=USER_ID (demo mode)"},
		{"demo, a uid", testConfig(), "?uid=alice", "?uid=USER_ID (demo mode)"},
		{"jwt, no token", jwt, "", "Authorization: Bearer TOKEN"},
		{"jwt, a bad token", jwt, "?token=bad", ""},
		{"demo, a bad uid", testConfig(), "?uid=a%20b", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, tc.cfg)
			resp, err := http.Get(s.srv.URL + "/ws" + tc.query)
			require.NoError(t, err)
			defer resp.Body.Close()
			var body struct{ Error string }
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
			if tc.says == "" {
				assert.Contains(t, []int{http.StatusBadRequest, http.StatusUnauthorized}, resp.StatusCode, body.Error)
				return
			}
			assert.Equal(t, http.StatusUpgradeRequired, resp.StatusCode, body.Error)
			assert.Equal(t, "websocket", resp.Header.Get("Upgrade"))
			assert.Contains(t, body.Error, "send a WebSocket upgrade")
			assert.Contains(t, body.Error, tc.says)
		})
	}
}
