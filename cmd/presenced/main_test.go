package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/presencedtest"
	"github.com/presenced/presenced/protocol"
)

const waitLong = 10 * time.Second

// defaults is what parseFlags returns with nothing set, changed by edit.
func defaults(edit func(*options)) options {
	o := options{addr: "127.0.0.1:8080", addrFrom: "default in demo mode: loopback only"}
	h := &o.hub
	h.Slots, h.Tick, h.MaxMessage, h.MemberList, h.PresenceLists = 31, time.Second, 4096, 100, 1000
	h.LastSeenTTL, h.TypingTTL, h.MaxChannels, h.MaxWatch = 24*time.Hour, 5*time.Second, 100, 1000
	h.MaxConnsPerUser, h.FrameRate, h.FrameBurst, h.ByteRate, h.QueueBytes = 100, 50, 100, 64<<10, 1<<20
	o.webhook.Queue = 100_000
	o.events.Keep, o.events.Max = time.Hour, 1_000_000
	h.MaxConns = defaultMaxConns()
	if edit != nil {
		edit(&o)
	}
	return o
}

// every is what parseFlags returns when every flag of the "all flags" cases
// is set, with addr from from.
func every(from string) options {
	return defaults(func(o *options) {
		h := &o.hub
		o.addr, o.addrFrom, o.jwtSecret, o.redis, o.node = "127.0.0.1:9", from, "s", "redis://x", "n1"
		h.Slots, h.Tick, h.MaxMessage, h.Origins, h.APIKey = 61, 500*time.Millisecond, 100, []string{"https://a.example", "b.example:8443"}, "k"
		h.Grace, h.LastSeenTTL, h.TypingTTL, h.MemberList, h.PresenceLists = 2*time.Second, time.Hour, 3*time.Second, 5, 50
		h.MaxConnsPerUser, h.FrameRate, h.FrameBurst, h.MaxChannels, h.ByteRate, h.QueueBytes = 7, 2.5, 9, 3, 1000, 100000
		h.MaxWatch, h.MaxConns = 20, 500
	})
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want options
	}{
		{name: "defaults: loopback in demo mode", want: defaults(nil)},
		{name: "all flags", args: []string{"-addr", "127.0.0.1:9", "-slots", "61", "-tick", "500ms", "-max-message", "100",
			"-origins", " https://a.example , b.example:8443,", "-jwt-secret", "s", "-api-key", "k", "-grace", "2s", "-redis", "redis://x", "-node", "n1",
			"-last-seen-ttl", "1h", "-typing-ttl", "3s", "-member-list", "5", "-presence-lists", "50", "-max-conns-per-user", "7", "-frame-rate", "2.5", "-frame-burst", "9",
			"-byte-rate", "1000", "-queue-bytes", "100000", "-max-channels", "3", "-max-watch", "20", "-max-conns", "500"},
			want: every("-addr")},
		{name: "every flag from the environment", env: map[string]string{
			"PRESENCED_ADDR": "127.0.0.1:9", "PRESENCED_SLOTS": "61", "PRESENCED_TICK": "500ms", "PRESENCED_MAX_MESSAGE": "100",
			"PRESENCED_ORIGINS": "https://a.example,b.example:8443", "PRESENCED_JWT_SECRET": "s", "PRESENCED_API_KEY": "k",
			"PRESENCED_GRACE": "2s", "PRESENCED_REDIS": "redis://x", "PRESENCED_NODE": "n1", "PRESENCED_LAST_SEEN_TTL": "1h", "PRESENCED_TYPING_TTL": "3s",
			"PRESENCED_MEMBER_LIST": "5", "PRESENCED_PRESENCE_LISTS": "50", "PRESENCED_MAX_CONNS_PER_USER": "7",
			"PRESENCED_FRAME_RATE": "2.5", "PRESENCED_FRAME_BURST": "9", "PRESENCED_BYTE_RATE": "1000", "PRESENCED_QUEUE_BYTES": "100000", "PRESENCED_MAX_CHANNELS": "3", "PRESENCED_MAX_WATCH": "20", "PRESENCED_MAX_CONNS": "500"},
			want: every("$PRESENCED_ADDR")},
		{name: "activity and webhooks", args: []string{"-away-after", "2m", "-webhook", "http://127.0.0.1:9/hook", "-webhook-secret", "w", "-webhook-queue", "10"},
			want: defaults(func(o *options) {
				o.hub.AwayAfter, o.webhook.URL, o.webhook.Secret, o.webhook.Queue = 2*time.Minute, "http://127.0.0.1:9/hook", "w", 10
			})},
		{name: "the log of edges", args: []string{"-events-keep", "10m", "-events-max", "5000"},
			want: defaults(func(o *options) { o.events.Keep, o.events.Max = 10*time.Minute, 5000 })},
		{name: "the log of edges from the environment", env: map[string]string{"PRESENCED_EVENTS_KEEP": "2h", "PRESENCED_EVENTS_MAX": "7"},
			want: defaults(func(o *options) { o.events.Keep, o.events.Max = 2*time.Hour, 7 })},
		{name: "activity and webhooks from the environment", env: map[string]string{"PRESENCED_AWAY_AFTER": "1m",
			"PRESENCED_WEBHOOK": "https://backend.example/presence", "PRESENCED_WEBHOOK_SECRET": "w", "PRESENCED_WEBHOOK_QUEUE": "5"},
			want: defaults(func(o *options) {
				o.hub.AwayAfter, o.webhook.URL, o.webhook.Secret, o.webhook.Queue = time.Minute, "https://backend.example/presence", "w", 5
			})},
		{name: "secret from env: all interfaces by default", env: map[string]string{"PRESENCED_JWT_SECRET": "e"},
			want: defaults(func(o *options) { o.jwtSecret, o.addr, o.addrFrom = "e", ":8080", "default" })},
		{name: "secret by flag: all interfaces by default", args: []string{"-jwt-secret", "f"},
			want: defaults(func(o *options) { o.jwtSecret, o.addr, o.addrFrom = "f", ":8080", "default" })},
		{name: "flag beats env: secret", args: []string{"-jwt-secret", "f"}, env: map[string]string{"PRESENCED_JWT_SECRET": "e"},
			want: defaults(func(o *options) { o.jwtSecret, o.addr, o.addrFrom = "f", ":8080", "default" })},
		{name: "public key by flag: all interfaces by default", args: []string{"-jwt-public-key", testKeyFile},
			want: defaults(func(o *options) { o.hub.JWT.PublicKeyFile, o.addr, o.addrFrom = testKeyFile, ":8080", "default" })},
		{name: "public key from env", env: map[string]string{"PRESENCED_JWT_PUBLIC_KEY": testKeyFile},
			want: defaults(func(o *options) { o.hub.JWT.PublicKeyFile, o.addr, o.addrFrom = testKeyFile, ":8080", "default" })},
		{name: "JWKS by flag", args: []string{"-jwks-url", "https://idp.example/jwks"},
			want: defaults(func(o *options) {
				o.hub.JWT.JWKSURL, o.addr, o.addrFrom = "https://idp.example/jwks", ":8080", "default"
			})},
		{name: "JWKS from env", env: map[string]string{"PRESENCED_JWKS_URL": "https://idp.example/jwks"},
			want: defaults(func(o *options) {
				o.hub.JWT.JWKSURL, o.addr, o.addrFrom = "https://idp.example/jwks", ":8080", "default"
			})},
		{name: "flag beats env: addr", args: []string{"-addr", ":1"}, env: map[string]string{"PRESENCED_ADDR": ":2"},
			want: defaults(func(o *options) { o.addr, o.addrFrom = ":1", "-addr" })},
		{name: "flag beats env: tick", args: []string{"-tick", "2s"}, env: map[string]string{"PRESENCED_TICK": "x"},
			want: defaults(func(o *options) { o.hub.Tick = 2 * time.Second })},
		{name: "flag beats env: member list", args: []string{"-member-list", "7"}, env: map[string]string{"PRESENCED_MEMBER_LIST": "9"},
			want: defaults(func(o *options) { o.hub.MemberList = 7 })},
		{name: "env fills what flags leave", args: []string{"-slots", "5"}, env: map[string]string{"PRESENCED_SLOTS": "9", "PRESENCED_API_KEY": "k"},
			want: defaults(func(o *options) { o.hub.Slots, o.hub.APIKey = 5, "k" })},
		{name: "demo mode on an address from env", env: map[string]string{"PRESENCED_ADDR": ":8081"},
			want: defaults(func(o *options) { o.addr, o.addrFrom = ":8081", "$PRESENCED_ADDR" })},
		{name: "typing TTL by flag", args: []string{"-typing-ttl", "2s"},
			want: defaults(func(o *options) { o.hub.TypingTTL = 2 * time.Second })},
		{name: "typing TTL from env", env: map[string]string{"PRESENCED_TYPING_TTL": "1500ms"},
			want: defaults(func(o *options) { o.hub.TypingTTL = 1500 * time.Millisecond })},
		{name: "origins with a trailing slash and a wildcard", args: []string{"-origins", "https://a.example/,*,http://[::1]:3000,localhost"},
			want: defaults(func(o *options) {
				o.hub.Origins = []string{"https://a.example/", "*", "http://[::1]:3000", "localhost"}
			})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseFlags(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestBadSettings checks that run refuses each setting it cannot serve
// with: exit code 2 and a message that names the flag or variable.
func TestBadSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"tick below 1ms", []string{"-tick", "999us"}, nil, "-tick 999µs: at least 1ms"},
		{"zero tick", []string{"-tick", "0"}, nil, "-tick 0s: at least 1ms"},
		{"one slot", []string{"-slots", "1"}, nil, "-slots 1: at least 2"},
		{"slots from env", nil, map[string]string{"PRESENCED_SLOTS": "1"}, "presenced: $PRESENCED_SLOTS 1: at least 2\n"},
		{"negative grace", []string{"-grace", "-1s"}, nil, "-grace -1s: not negative"},
		{"member list 0", []string{"-member-list", "0"}, nil, "-member-list 0: at least 1"},
		{"typing TTL below 1ms", []string{"-typing-ttl", "500us"}, nil, "-typing-ttl 500µs: at least 1ms"},
		{"typing TTL from env", nil, map[string]string{"PRESENCED_TYPING_TTL": "0"}, "$PRESENCED_TYPING_TTL 0s: at least 1ms"},
		{"presence lists 0", []string{"-presence-lists", "0"}, nil, "-presence-lists 0: at least 1"},
		{"conns per user 0", []string{"-max-conns-per-user", "0"}, nil, "-max-conns-per-user 0: at least 1"},
		{"negative conns cap", []string{"-max-conns", "-1"}, nil, "-max-conns -1: not negative"},
		{"frame rate 0", []string{"-frame-rate", "0"}, nil, "must be positive"},
		{"tiny queue", []string{"-queue-bytes", "100"}, nil, "-queue-bytes 100: at least 64 KiB"},
		{"max message 0", []string{"-max-message", "0"}, nil, "-max-message 0: at least 1 byte"},
		{"origin without host", []string{"-origins", "https://"}, nil, `-origins: "https://": no host`},
		{"origin with a path", []string{"-origins", "https://a.example/app"}, nil, `-origins: "https://a.example/app": an origin is scheme://host[:port], with no path`},
		{"origin with a space", []string{"-origins", "https://a.example b.example"}, nil, `has a space`},
		{"origin with a bad port", []string{"-origins", "a.example:http"}, nil, `-origins: "a.example:http"`},
		{"origin without a scheme name", []string{"-origins", "://a.example"}, nil, `want scheme://host[:port]`},
		{"origin from env", nil, map[string]string{"PRESENCED_ORIGINS": "https://ok.example,http:///x"}, `$PRESENCED_ORIGINS: "http:///x"`},
		{"webhook secret alone from env", nil, map[string]string{"PRESENCED_WEBHOOK_SECRET": "w"}, "$PRESENCED_WEBHOOK_SECRET without -webhook"},
		{"bad value in env", nil, map[string]string{"PRESENCED_TICK": "soon"}, `presenced: $PRESENCED_TICK: "soon" is not a duration such as 500ms or 1s` + "\n"},
		{"bad number in env", nil, map[string]string{"PRESENCED_MEMBER_LIST": "many"}, `$PRESENCED_MEMBER_LIST: "many" is not a whole number such as 100`},
		{"bad bool in env", nil, map[string]string{"PRESENCED_PARK_READERS": "yes"}, `$PRESENCED_PARK_READERS: "yes" is not true or false`},
		{"empty address", []string{"-addr", ""}, nil, `-addr "": want host:port`},
		{"bad duration", []string{"-tick", "banana"}, nil, "presenced: -tick: \"banana\" is not a duration such as 500ms or 1s\n" +
			"presenced -h lists the flags, their variables and the form of each value.\n"},
		{"bad float", []string{"-frame-rate", "fast"}, nil, `-frame-rate: "fast" is not a number such as 50 or 2.5`},
		{"number out of range", []string{"-slots", "99999999999999999999"}, nil, `-slots: "99999999999999999999" is out of range`},
		{"unknown flag", []string{"-verbose"}, nil, "flag provided but not defined"},
		{"watch list over the protocol's", []string{"-max-watch", "1001"}, nil, "-max-watch 1001: at most 1000"},
		{"negative away-after", []string{"-away-after", "-1s"}, nil, "-away-after -1s: not negative"},
		{"webhook not a URL", []string{"-webhook", "backend:8080/hook"}, nil, `-webhook: webhook: URL`},
		{"webhook of another scheme", []string{"-webhook", "ftp://backend/hook"}, nil, `scheme "ftp" is not http or https`},
		{"webhook queue 0", []string{"-webhook", "http://127.0.0.1:9/", "-webhook-queue", "0"}, nil, "-webhook-queue 0: at least 1"},
		{"webhook secret alone", []string{"-webhook-secret", "w"}, nil, "-webhook-secret without -webhook"},
		{"stray argument", []string{"extra"}, nil, "unexpected arguments"},
		{"secret and JWKS", []string{"-jwt-secret", "s", "-jwks-url", "https://idp.example/jwks"}, nil, "-jwt-secret, -jwt-public-key and -jwks-url: set one"},
		{"public key and JWKS from env", nil, map[string]string{"PRESENCED_JWT_PUBLIC_KEY": testKeyFile, "PRESENCED_JWKS_URL": "https://idp.example/jwks"}, "set one"},
		{"secret and public key", []string{"-jwt-secret", "s", "-jwt-public-key", testKeyFile}, nil, "set one"},
		{"no key file", []string{"-jwt-public-key", "/nonexistent/key.pem"}, nil, "-jwt-public-key: transport: JWTConfig.PublicKeyFile: open /nonexistent/key.pem"},
		{"key file from env", nil, map[string]string{"PRESENCED_JWT_PUBLIC_KEY": "main.go"}, "$PRESENCED_JWT_PUBLIC_KEY: transport: JWTConfig.PublicKeyFile: main.go: no PEM block"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			code := run(context.Background(), tc.args, func(k string) string { return tc.env[k] }, &out, &out)
			assert.Equal(t, 2, code, out.String())
			assert.Contains(t, out.String(), tc.want)
			assert.NotContains(t, out.String(), "listening")
			assert.NotContains(t, out.String(), "Usage:", "one line and a pointer to -h, not the usage")
		})
	}
}

// PRESENCED_VERSION is many a deployment's own variable: the server does
// not read it (it would exit), it warns of it, as of any other variable
// that names no flag, with the flag closest to a typo.
func TestStrayVariablesWarn(t *testing.T) {
	t.Setenv("PRESENCED_VERSION", "1.4.2")
	t.Setenv("PRESENCED_TIK", "5s")
	t.Setenv("PRESENCED_MAXWATCH", "5")
	env := map[string]string{"PRESENCED_VERSION": "1.4.2", "PRESENCED_TIK": "5s", "PRESENCED_MAXWATCH": "5"}
	_, out := startRun(t, nil, env)
	for _, want := range []string{
		`msg="$PRESENCED_VERSION is ignored: -version is a command-line flag only"`,
		`msg="$PRESENCED_TIK names no flag and is ignored; the closest is -tick ($PRESENCED_TICK)"`,
		`msg="$PRESENCED_MAXWATCH names no flag and is ignored; the closest is -max-watch ($PRESENCED_MAX_WATCH)"`,
		"tick=1s",
	} {
		assert.Contains(t, out.String(), want)
	}
	for _, v := range []string{"1", "true", "v2.2"} {
		o, err := parseFlags(nil, func(k string) string { return map[string]string{"PRESENCED_VERSION": v}[k] }, io.Discard)
		require.NoError(t, err, v)
		assert.False(t, o.version, "PRESENCED_VERSION=%s", v)
	}
	assert.Empty(t, strayVariables([]string{"PRESENCED_TICK=1s", "PRESENCED_MAX_WATCH=5", "HOME=/root", "PRESENCEDX=1"}, os.Getenv))
	assert.Empty(t, strayVariables([]string{"PRESENCED_TIK=5s"}, func(string) string { return "" }), "not in run's environment")
}

func TestHelpNamesTheVariables(t *testing.T) {
	var out bytes.Buffer
	assert.Equal(t, 0, run(context.Background(), []string{"-h"}, func(string) string { return "" }, &out, &out))
	help := out.String()
	assert.Contains(t, help, "a flag on the command line\nwins over its variable")
	for _, v := range []string{"PRESENCED_ADDR", "PRESENCED_TICK", "PRESENCED_MEMBER_LIST", "PRESENCED_JWT_SECRET", "PRESENCED_API_KEY",
		"PRESENCED_SLOTS", "PRESENCED_ORIGINS", "PRESENCED_GRACE", "PRESENCED_REDIS", "PRESENCED_NODE", "PRESENCED_MAX_MESSAGE", "PRESENCED_PRESENCE_LISTS"} {
		assert.Contains(t, help, "($"+v+")", "-h names %s", v)
	}
	assert.Contains(t, help, "127.0.0.1:8080 in demo mode")
	for _, want := range []string{"\n  -tick duration\n", "\n  -slots n\n", "\n  -frame-rate number\n", "\n  -origins list\n",
		"\n  -webhook url\n", "\n  -redis url\n", "\n  -addr host:port\n", "\n  -api-key secret\n", "\n  -version\n", "(default 1s)"} {
		assert.Contains(t, help, want)
	}
	assert.NotContains(t, help, " value\n", "every placeholder names its kind")
	assert.NotContains(t, help, "PRESENCED_VERSION", "-version is a flag only")
}

func TestLogAttrsRedactRedisPassword(t *testing.T) {
	attrs := fmt.Sprint(defaults(func(o *options) { o.redis = "redis://:pw-123@db:6379/0" }).logAttrs(":1", time.Second))
	assert.NotContains(t, attrs, "pw-123")
	assert.Contains(t, attrs, "redis://:xxxxx@db:6379/0")
}

func TestStartupLine(t *testing.T) {
	_, out := startRun(t, []string{"-jwt-secret", "hush-1", "-api-key", "hush-2", "-redis", ""}, nil)
	line := listening.FindString(out.String())
	require.NotEmpty(t, line)
	full := out.String()
	assert.NotContains(t, full, "hush-1", "the JWT secret is never logged")
	assert.NotContains(t, full, "hush-2", "the API key is never logged")
	for _, want := range []string{"addr_from=-addr", "mode=jwt", "jwt_secret=set", "api_key=set", "slots=31", "tick=1s", "timeout=30s",
		"grace=0s", "max_message=4096", "member_list=100", "presence_lists=1000", `origins="same host only"`} {
		assert.Contains(t, full, want)
	}

	assert.NotContains(t, full, " url=", "the demo page is for demo mode")
	addr, out := startRun(t, nil, map[string]string{"PRESENCED_ADDR": "127.0.0.1:0", "PRESENCED_TICK": "250ms"})
	assert.Contains(t, out.String(), "msg=listening addr="+addr+" url=http://"+addr+"/ ", "the page to open, in demo mode")
	for _, want := range []string{"addr_from=$PRESENCED_ADDR", "mode=demo", "jwt_secret=unset", "api_key=unset", "tick=250ms", "timeout=7.5s"} {
		assert.Contains(t, out.String(), want)
	}
}

var listening = regexp.MustCompile(`msg=listening addr=(\S+)`)

// startRun runs the server in-process on a free loopback port and returns
// its address; the server stops when the test ends.
func startRun(t *testing.T, args []string, env map[string]string) (string, *presencedtest.SyncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &presencedtest.SyncBuffer{}
	code := make(chan int, 1)
	go func() {
		if env["PRESENCED_ADDR"] == "" {
			args = append([]string{"-addr", "127.0.0.1:0"}, args...)
		}
		code <- run(ctx, args, func(k string) string { return env[k] }, out, out)
	}()
	t.Cleanup(func() {
		cancel()
		assert.Equal(t, 0, <-code, out.String())
	})
	var addr string
	require.Eventually(t, func() bool {
		m := listening.FindStringSubmatch(out.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, waitLong, 5*time.Millisecond, "no listening line: %s", out)
	return addr, out
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestServesPageAPIAndMetrics(t *testing.T) {
	// A 20 s timeout: alice never answers a ping, and must stay online
	// however slowly the checks run.
	addr, out := startRun(t, []string{"-slots", "11", "-tick", "2s"}, nil)
	assert.Equal(t, 1, strings.Count(out.String(), "level=WARN"), "warns once when running without authentication: %s", out)
	assert.Contains(t, out.String(), "demo mode")
	base := "http://" + addr

	code, body := get(t, base+"/")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, strings.ToLower(body), "<html")

	ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws?uid=alice&channels=lobby", nil)
	require.NoError(t, err)
	defer ws.Close()
	_, welcome, err := ws.ReadMessage()
	require.NoError(t, err)
	assert.Equal(t, `{"type":"welcome","uid":"alice","timeout_ms":20000,"protocol":"`+protocol.Version+`"}`, string(welcome))
	_, joined, err := ws.ReadMessage()
	require.NoError(t, err)
	assert.Equal(t, `{"type":"joined","channel":"lobby","count":1,"members":["alice"]}`, string(joined))

	for _, tc := range []struct{ path, want string }{
		{"/healthz", `"status":"ok"`},
		{"/api/presence", `{"count":1,"users":["alice"]}`},
		{"/api/presence/alice", `{"uid":"alice","online":true,"connections":1,"state":"active"}`},
		{"/api/channels/lobby", `{"channel":"lobby","count":1,"members":["alice"]}`},
		{"/api/ring", `"slots":11,"tick_ms":2000`},
		{"/metrics", "presenced_connections 1"},
		{"/metrics", `presenced_frames_sent_total{type="joined"} 1`},
		{"/metrics", "go_goroutines"},
		{"/openapi.yaml", "openapi: 3.1"},
		{"/schema/server-frames.json", `"welcome"`},
	} {
		code, body := get(t, base+tc.path)
		assert.Equal(t, http.StatusOK, code, tc.path)
		assert.Contains(t, body, tc.want, tc.path)
	}
}

func TestJWTSecretFromEnvironment(t *testing.T) {
	addr, out := startRun(t, nil, map[string]string{"PRESENCED_JWT_SECRET": "s3cret"})
	assert.NotContains(t, out.String(), "demo mode")
	_, resp, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws?uid=alice", nil)
	require.Error(t, err)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bob", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte("s3cret"))
	require.NoError(t, err)
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws?token="+tok, nil)
	require.NoError(t, err)
	defer ws.Close()
	_, welcome, err := ws.ReadMessage()
	require.NoError(t, err)
	assert.Contains(t, string(welcome), `"uid":"bob"`)
}

func TestStartupErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad redis URL", []string{"-redis", "http://127.0.0.1:6379"}, 1, "-redis"},
		{"bad address", []string{"-addr", "256.0.0.1:1"}, 1, "listen"},
		{"JWKS URL of another scheme", []string{"-jwks-url", "ftp://idp.example/jwks"}, 1, "JWKSURL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			assert.Equal(t, tc.code, run(context.Background(), tc.args, func(string) string { return "" }, &out, &out))
			assert.Contains(t, out.String(), tc.want)
		})
	}
}

// TestSIGTERMClosesClientsWith1001 builds the real binary, runs it, and
// checks that SIGTERM reaches a connected client as close 1001 and that the
// process then exits 0.
func TestSIGTERMClosesClientsWith1001(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	// The default 30 s timeout: the clients read nothing until the close, so
	// they must not be dropped as idle first.
	p := presencedtest.Start(t, presencedtest.Build(t))
	addr := p.Addr

	var clients []*websocket.Conn
	for _, uid := range []string{"alice", "bob"} {
		ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws?uid="+uid, nil)
		require.NoError(t, err)
		defer ws.Close()
		_, _, err = ws.ReadMessage()
		require.NoError(t, err)
		clients = append(clients, ws)
	}
	require.NoError(t, p.Signal(syscall.SIGTERM))
	for _, ws := range clients {
		require.NoError(t, ws.SetReadDeadline(time.Now().Add(waitLong)))
		var err error
		for err == nil {
			_, _, err = ws.ReadMessage()
		}
		var ce *websocket.CloseError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, websocket.CloseGoingAway, ce.Code)
	}
	exited := make(chan int, 1)
	go func() { exited <- p.Wait() }()
	select {
	case code := <-exited:
		assert.Equal(t, 0, code, "exit status 0")
	case <-time.After(waitLong):
		t.Fatal("the server did not exit after SIGTERM")
	}
}

// TestHealthAndReadiness checks that /healthz and /readyz are mounted: 200
// while serving, with a JSON body.
func TestHealthAndReadiness(t *testing.T) {
	addr, _ := startRun(t, nil, nil)
	for _, p := range []string{"/healthz", "/readyz"} {
		code, body := get(t, "http://"+addr+p)
		assert.Equal(t, http.StatusOK, code, p)
		assert.True(t, json.Valid([]byte(body)), "%s: %s", p, body)
	}
}

// TestServerAPIKey checks who may use the server API: anyone in demo mode
// without a key, only holders of the key when there is one, and nobody in
// JWT mode without a key. The page's own endpoints stay open.
func TestServerAPIKey(t *testing.T) {
	const key = "k-123"
	type call struct {
		method, path, auth string
		want               int
	}
	presence := func(auth string, want int) []call {
		return []call{
			{"GET", "/api/presence", auth, want},
			{"GET", "/api/presence/alice", auth, want},
			{"GET", "/api/channels/lobby", auth, want},
		}
	}
	for _, tc := range []struct {
		name  string
		args  []string
		env   map[string]string
		calls []call
	}{
		{"demo mode, no key: open", nil, nil, presence("", 200)},
		{"demo mode with a key", []string{"-api-key", key}, nil, append(append(append(
			presence("", 401),
			presence("apikey wrong", 401)...),
			presence("apikey "+key, 200)...),
			call{"GET", "/api/presence", "Bearer " + key, 401},
			call{"GET", "/api/presence", "APIKEY " + key, 200},
			call{"POST", "/api/publish", "", 401},
			call{"POST", "/api/publish", "apikey " + key, 204},
			call{"POST", "/api/send", "", 401},
			call{"POST", "/api/send", "apikey " + key, 204},
			call{"POST", "/api/disconnect", "", 401},
			call{"POST", "/api/disconnect", "apikey " + key, 204},
			call{"GET", "/api/ring", "", 200},
			call{"GET", "/healthz", "", 200},
			call{"GET", "/readyz", "", 200})},
		{"key from the environment", nil, map[string]string{"PRESENCED_API_KEY": key},
			append(presence("", 401), presence("apikey "+key, 200)...)},
		{"JWT mode, no key: 403", []string{"-jwt-secret", "s"}, nil, append(presence("", 403),
			call{"POST", "/api/publish", "", 403},
			call{"POST", "/api/send", "", 403},
			call{"POST", "/api/disconnect", "", 403},
			call{"GET", "/api/ring", "", 200},
			call{"POST", "/api/heartbeat", "", 401})},
		{"JWT mode with a key", []string{"-jwt-secret", "s", "-api-key", key}, nil,
			append(presence("", 401), presence("apikey "+key, 200)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, _ := startRun(t, tc.args, tc.env)
			for _, c := range tc.calls {
				var body io.Reader
				switch c.path {
				case "/api/publish":
					body = strings.NewReader(`{"channel":"lobby","data":{"n":1}}`)
				case "/api/send":
					body = strings.NewReader(`{"uid":"alice","data":{"n":1}}`)
				case "/api/disconnect":
					body = strings.NewReader(`{"uid":"alice","reason":"spam"}`)
				}
				req, err := http.NewRequest(c.method, "http://"+addr+c.path, body)
				require.NoError(t, err)
				if c.auth != "" {
					req.Header.Set("Authorization", c.auth)
				}
				res, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				b, err := io.ReadAll(res.Body)
				res.Body.Close()
				require.NoError(t, err)
				assert.Equal(t, c.want, res.StatusCode, "%s %s with %q: %s", c.method, c.path, c.auth, b)
				if c.want >= 400 {
					var e struct{ Error string }
					assert.NoError(t, json.Unmarshal(b, &e), "%s %s: a JSON refusal: %s", c.method, c.path, b)
					assert.NotEmpty(t, e.Error, "%s %s: %s", c.method, c.path, b)
				}
			}
		})
	}
}

// TestUnknownPathsAndMethods checks the server's refusals outside the page
// are JSON too.
func TestUnknownPathsAndMethods(t *testing.T) {
	addr, _ := startRun(t, nil, nil)
	for _, tc := range []struct {
		method, path string
		want         int
		allow        string
	}{
		{"GET", "/nope", 404, ""},
		{"GET", "/api/nope", 404, ""},
		{"DELETE", "/api/presence", 405, "GET, HEAD, OPTIONS"},
		{"POST", "/", 405, "GET, HEAD"},
		{"POST", "/metrics", 405, "GET, HEAD"},
	} {
		req, err := http.NewRequest(tc.method, "http://"+addr+tc.path, nil)
		require.NoError(t, err)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		assert.Equal(t, tc.want, res.StatusCode, "%s %s", tc.method, tc.path)
		assert.Equal(t, "application/json", res.Header.Get("Content-Type"), "%s %s", tc.method, tc.path)
		assert.True(t, json.Valid(b), "%s %s: %s", tc.method, tc.path, b)
		if tc.allow != "" {
			assert.Equal(t, tc.allow, res.Header.Get("Allow"), "%s %s", tc.method, tc.path)
		}
	}
}

func TestPageURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:8080": "http://127.0.0.1:8080/",
		"0.0.0.0:8080":   "http://localhost:8080/",
		"[::]:9000":      "http://localhost:9000/",
		"[::1]:8080":     "http://[::1]:8080/",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		require.NoError(t, err)
		assert.Equal(t, want, pageURL(a), addr)
	}
}
