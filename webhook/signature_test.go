package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/webhook"
)

// The ids' formats: a random 128-bit prefix per Sender in lowercase base32,
// the batch's number, and the event's place in it.
var (
	batchID = regexp.MustCompile(`^msg_[a-z2-7]{26}_[1-9][0-9]*$`)
	eventID = regexp.MustCompile(`^evt_[a-z2-7]{26}_[1-9][0-9]*_(0|[1-9][0-9]*)$`)
)

// standardSig is the webhook-signature a receiver expects: "v1," and the
// base64 HMAC-SHA256, keyed with key, of id.timestamp.body.
func standardSig(key []byte, id, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// legacySig is the deprecated X-Presenced-Signature: "sha256=" and the hex
// HMAC-SHA256 of the body.
func legacySig(key []byte, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// unix parses a webhook-timestamp: decimal Unix seconds.
func unix(t *testing.T, h http.Header) int64 {
	t.Helper()
	ts := h.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	require.NoError(t, err, "webhook-timestamp %q", ts)
	require.Equal(t, strconv.FormatInt(sec, 10), ts, "webhook-timestamp in plain decimal")
	return sec
}

// Each POST is signed over its webhook-id, its webhook-timestamp and its
// body: with a raw secret's bytes as the key, or with the bytes a whsec_
// secret encodes. The deprecated header keeps its key: the secret as given.
func TestStandardSignature(t *testing.T) {
	decoded := []byte("a key of 24 random bytes")
	whsec := "whsec_" + base64.StdEncoding.EncodeToString(decoded)
	for _, tc := range []struct {
		name, secret string
		key          []byte // of webhook-signature
	}{
		{"raw", "s3cret", []byte("s3cret")},
		{"whsec", whsec, decoded},
		{"whsec with padding", "whsec_" + base64.StdEncoding.EncodeToString([]byte("sixteen byte key")), []byte("sixteen byte key")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := newReceiver(t, nil)
			before := time.Now().Unix()
			s := start(t, webhook.Config{URL: rc.URL, Secret: tc.secret, MaxBatch: 4})
			evs := events(0, 10)
			s.Add(evs...)
			requireSame(t, evs, rc.waitDelivered(t, len(evs), false))
			after := time.Now().Unix()

			reqs := rc.requests()
			require.Len(t, reqs, 3)
			for i, r := range reqs {
				id := r.header.Get("webhook-id")
				assert.Regexp(t, batchID, id, "POST %d", i)
				sec := unix(t, r.header)
				assert.GreaterOrEqual(t, sec, before, "POST %d: timestamp", i)
				assert.LessOrEqual(t, sec, after, "POST %d: timestamp", i)
				assert.Equal(t, []string{standardSig(tc.key, id, r.header.Get("webhook-timestamp"), r.body)},
					r.header.Values("webhook-signature"), "POST %d", i)
				assert.Equal(t, []string{legacySig([]byte(tc.secret), r.body)},
					r.header.Values("X-Presenced-Signature"), "POST %d: the deprecated header", i)
			}
		})
	}
}

// A batch sent again keeps its webhook-id, its body and so its event ids;
// each attempt has its own timestamp, and a signature over that. The next
// batch has a webhook-id of its own.
func TestRetryKeepsBatchIdentity(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	key, err := base64.StdEncoding.DecodeString(secret[len("whsec_"):])
	require.NoError(t, err)
	rc := newReceiver(t, func(i int, _ *http.Request) int {
		if i == 0 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	// A backoff of over a second, so that the retry falls in a later second
	// than the first attempt, however the machine schedules it.
	s, err := webhook.New(webhook.Config{URL: rc.URL, Secret: secret, MaxBatch: 5,
		MinBackoff: 1100 * time.Millisecond, MaxBackoff: 1100 * time.Millisecond})
	require.NoError(t, err)
	evs := events(0, 8)
	s.Add(evs...) // before Run: the first batch is full
	runUntilCleanup(t, s)

	requireSame(t, evs, rc.waitDelivered(t, len(evs), false))
	reqs := rc.requests()
	require.Len(t, reqs, 3)
	first, retry, next := reqs[0], reqs[1], reqs[2]
	assert.Equal(t, http.StatusServiceUnavailable, first.status)

	id := first.header.Get("webhook-id")
	assert.Regexp(t, batchID, id)
	assert.Equal(t, id, retry.header.Get("webhook-id"), "the retry's webhook-id")
	assert.Equal(t, string(first.body), string(retry.body), "the retry's body")
	require.Len(t, retry.events, 5)
	for i := range first.events {
		assert.Equal(t, first.events[i].ID, retry.events[i].ID, "event %d: id on the retry", i)
	}
	assert.Greater(t, unix(t, retry.header), unix(t, first.header), "the retry's timestamp")
	for i, r := range reqs {
		assert.Equal(t, standardSig(key, r.header.Get("webhook-id"), r.header.Get("webhook-timestamp"), r.body),
			r.header.Get("webhook-signature"), "POST %d", i)
		assert.Equal(t, legacySig([]byte(secret), r.body), r.header.Get("X-Presenced-Signature"),
			"POST %d: the deprecated header", i)
	}
	assert.NotEqual(t, first.header.Get("webhook-signature"), retry.header.Get("webhook-signature"),
		"the retry is signed over its own timestamp")
	assert.Equal(t, first.header.Get("X-Presenced-Signature"), retry.header.Get("X-Presenced-Signature"),
		"the deprecated header covers the body alone")

	assert.Regexp(t, batchID, next.header.Get("webhook-id"))
	assert.NotEqual(t, id, next.header.Get("webhook-id"), "the next batch's webhook-id")
}

// Event ids and webhook-ids are unique across batches and across Senders
// (nodes of a cluster, or a node restarted), and have the documented form.
func TestIDsUnique(t *testing.T) {
	rc := newReceiver(t, nil)
	const senders, batches, per = 3, 4, 50
	for k := range senders {
		s := start(t, webhook.Config{URL: rc.URL, MaxBatch: per})
		s.Add(events(k*batches*per, batches*per)...)
	}
	got := rc.waitDelivered(t, senders*batches*per, false)
	require.Len(t, got, senders*batches*per)
	seen := map[string]bool{}
	for i, e := range got {
		assert.Regexp(t, eventID, e.ID, "event %d", i)
		assert.False(t, seen[e.ID], "event %d: id %s seen before", i, e.ID)
		seen[e.ID] = true
	}
	msgs := map[string]bool{}
	prefixes := map[string]bool{}
	for i, r := range rc.requests() {
		id := r.header.Get("webhook-id")
		assert.Regexp(t, batchID, id, "POST %d", i)
		assert.False(t, msgs[id], "POST %d: webhook-id %s seen before", i, id)
		msgs[id] = true
		prefixes[id[len("msg_"):len("msg_")+26]] = true
		for j, e := range r.events {
			// An event's id names its batch and its place in it.
			assert.Equal(t, "evt_"+id[len("msg_"):]+"_"+strconv.Itoa(j), e.ID, "POST %d event %d", i, j)
		}
	}
	assert.Len(t, msgs, senders*batches, "POSTs")
	assert.Len(t, prefixes, senders, "a prefix per Sender")
}

// A whsec_ secret whose key is not valid base64, or empty, is a config
// error from New, which does not repeat the secret.
func TestNewRejectsBadWhsecSecret(t *testing.T) {
	const ok = "http://127.0.0.1:9/hook"
	for _, secret := range []string{
		"whsec_!!!not-base64!!!",
		"whsec_abc",         // not padded
		"whsec_YWJjZA",      // not padded
		"whsec_YWJj ZA==",   // a space
		"whsec_YWJjZA-_",    // the URL alphabet
		"whsec_",            // no key
		"whsec_MfKQ9r8GKYq", // cut short
	} {
		s, err := webhook.New(webhook.Config{URL: ok, Secret: secret})
		if assert.Error(t, err, secret) {
			assert.Nil(t, s, secret)
			assert.Contains(t, err.Error(), "Secret", secret)
			assert.Contains(t, err.Error(), "whsec_", secret)
			if rest := secret[len("whsec_"):]; len(rest) > 3 {
				assert.NotContains(t, err.Error(), rest, "the error repeats the secret")
			}
		}
	}
	for _, secret := range []string{"", "whsec", "WHSEC_abc", "raw secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_YWI="} {
		_, err := webhook.New(webhook.Config{URL: ok, Secret: secret})
		assert.NoError(t, err, secret)
	}
}
