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
	for _, p := range []string{"/app.js", "/conn.js", "/ring.js", "/rooms.js", "/format.js", "/style.css", "/favicon.svg"} {
		assert.True(t, seen[p], "%s is not reachable from index.html", p)
	}
}
