package web_test

import (
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/web"
)

var (
	// attrRef finds src= and href= values in HTML.
	attrRef = regexp.MustCompile(`\b(?:src|href)="([^"]+)"`)
	// importRef finds the specifiers of static ES module imports.
	importRef = regexp.MustCompile(`(?m)^\s*import\b[^;]*?\bfrom\s+'([^']+)'`)
)

func get(t *testing.T, srv *httptest.Server, p string) (*http.Response, string) {
	t.Helper()
	res, err := http.Get(srv.URL + p)
	require.NoError(t, err, "GET %s", p)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err, "read %s", p)
	return res, string(body)
}

// TestHandlerServesPageAndAssets walks every file the page references, from
// index.html through the module imports, and checks each is served with the
// type a browser insists on (module scripts need a JavaScript MIME type).
func TestHandlerServesPageAndAssets(t *testing.T) {
	srv := httptest.NewServer(web.Handler())
	defer srv.Close()

	res, page := get(t, srv, "/")
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.True(t, strings.HasPrefix(res.Header.Get("Content-Type"), "text/html"), res.Header.Get("Content-Type"))
	assert.Contains(t, page, `<script type="module" src="app.js">`)
	assert.Contains(t, page, `name="viewport"`, "readable on a phone")

	wantType := map[string]string{".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
	seen := map[string]bool{}
	queue := []string{}
	for _, m := range attrRef.FindAllStringSubmatch(page, -1) {
		queue = append(queue, "/"+m[1])
	}
	for len(queue) > 0 {
		p := path.Clean(queue[0])
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		res, body := get(t, srv, p)
		if !assert.Equal(t, http.StatusOK, res.StatusCode, "GET %s", p) {
			continue
		}
		ext := path.Ext(p)
		if want, ok := wantType[ext]; assert.True(t, ok, "unexpected asset type %s", p) {
			got, _, err := mime.ParseMediaType(res.Header.Get("Content-Type"))
			require.NoError(t, err, p)
			assert.Equal(t, want, got, "Content-Type of %s", p)
		}
		if ext == ".js" {
			for _, m := range importRef.FindAllStringSubmatch(body, -1) {
				require.True(t, strings.HasPrefix(m[1], "./"), "%s imports %q: only relative modules of this page", p, m[1])
				queue = append(queue, path.Join(path.Dir(p), m[1]))
			}
		}
	}
	for _, p := range []string{"/app.js", "/presenced.js", "/ring.js", "/rooms.js", "/format.js", "/state.js", "/sims.js", "/members.js", "/watched.js", "/chat.js", "/style.css", "/favicon.svg"} {
		assert.True(t, seen[p], "%s is not reachable from index.html", p)
	}
}

// TestHandlerRefusesInJSON checks the refusals: a path that names no file of
// the page is a JSON 404, another method a JSON 405 with Allow, never the
// file server's plain text or a directory listing.
func TestHandlerRefusesInJSON(t *testing.T) {
	srv := httptest.NewServer(web.Handler())
	defer srv.Close()
	for _, tc := range []struct {
		method, path string
		want         int
		body         string
	}{
		{"GET", "/", 200, ""},
		{"HEAD", "/", 200, ""},
		{"GET", "/app.js", 200, ""},
		{"HEAD", "/style.css", 200, ""},
		{"GET", "/nope", 404, `{"error":"not found"}`},
		{"GET", "/nope.js", 404, `{"error":"not found"}`},
		{"GET", "/app.js/", 404, `{"error":"not found"}`},
		{"GET", "/static/app.js", 404, `{"error":"not found"}`},
		{"GET", "/a/../app.js", 404, `{"error":"not found"}`},
		{"GET", "//app.js", 404, `{"error":"not found"}`},
		{"HEAD", "/nope", 404, ""},
		{"POST", "/", 405, `{"error":"method not allowed"}`},
		{"PUT", "/app.js", 405, `{"error":"method not allowed"}`},
		{"DELETE", "/nope", 405, `{"error":"method not allowed"}`},
		{"OPTIONS", "/", 405, `{"error":"method not allowed"}`},
	} {
		req, err := http.NewRequest(tc.method, srv.URL, nil)
		require.NoError(t, err)
		req.URL.Path = tc.path // as sent, not cleaned by the client
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err, "%s %s", tc.method, tc.path)
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		what := tc.method + " " + tc.path
		assert.Equal(t, tc.want, res.StatusCode, what)
		if tc.want == 200 {
			continue
		}
		assert.Equal(t, "application/json", res.Header.Get("Content-Type"), what)
		if tc.body != "" {
			assert.JSONEq(t, tc.body, string(body), what)
		}
		if tc.want == http.StatusMethodNotAllowed {
			assert.Equal(t, "GET, HEAD", res.Header.Get("Allow"), what)
		}
	}
}
