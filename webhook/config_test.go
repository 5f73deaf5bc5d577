package webhook_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/webhook"
)

// New rejects what it could not deliver to or count on, and says which
// field is wrong.
func TestNewRejects(t *testing.T) {
	const ok = "http://127.0.0.1:9/hook"
	for _, tc := range []struct {
		name string
		cfg  webhook.Config
		want string // in the error
	}{
		{"no URL", webhook.Config{}, "no URL"},
		{"relative path", webhook.Config{URL: "/hook"}, "not absolute"},
		{"no scheme", webhook.Config{URL: "backend.example/hook"}, "not absolute"},
		{"no host", webhook.Config{URL: "http:///hook"}, "not absolute"},
		{"unparsable", webhook.Config{URL: "http://[::1"}, "URL"},
		{"ftp", webhook.Config{URL: "ftp://backend.example/hook"}, `scheme "ftp"`},
		{"ws", webhook.Config{URL: "ws://backend.example/hook"}, `scheme "ws"`},
		{"negative Queue", webhook.Config{URL: ok, Queue: -1}, "Queue"},
		{"negative MaxBatch", webhook.Config{URL: ok, MaxBatch: -1}, "MaxBatch"},
		{"negative Timeout", webhook.Config{URL: ok, Timeout: -time.Second}, "Timeout"},
		{"negative MinBackoff", webhook.Config{URL: ok, MinBackoff: -time.Second}, "MinBackoff"},
		{"negative MaxBackoff", webhook.Config{URL: ok, MaxBackoff: -time.Second}, "MaxBackoff"},
		{"MinBackoff above MaxBackoff", webhook.Config{URL: ok, MinBackoff: 2 * time.Second, MaxBackoff: time.Second}, "MinBackoff 2s is above MaxBackoff 1s"},
		{"default MinBackoff above MaxBackoff", webhook.Config{URL: ok, MaxBackoff: 50 * time.Millisecond}, "MinBackoff 100ms is above MaxBackoff 50ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := webhook.New(tc.cfg)
			require.Error(t, err)
			assert.Nil(t, s)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// New accepts http and https URLs with defaults for the rest, and keeps a
// URL's password out of its errors.
func TestNewAccepts(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:9/hook", "https://backend.example", "HTTPS://user:pw@backend.example:8443/a?b=c"} {
		_, err := webhook.New(webhook.Config{URL: u})
		assert.NoError(t, err, u)
	}
	_, err := webhook.New(webhook.Config{URL: "ftp://user:hunter2@backend.example/"})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hunter2")
}
