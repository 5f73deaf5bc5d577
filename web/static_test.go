package web

import (
	"io/fs"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// absURL finds anything that names another origin: a scheme with //, or a
// protocol-relative URL in an attribute, url() or a string.
var absURL = regexp.MustCompile(`(?i)\b(?:https?|wss?|ftp):\/\/[^\s"'<>)]*|["'(]\/\/[a-z0-9]`)

// namespaces are URIs that identify XML vocabularies; a browser never fetches them.
var namespaces = map[string]bool{"http://www.w3.org/2000/svg": true}

// TestStaticFetchesNothingOutside fails if any embedded file names another
// origin: the page must work offline, from the server alone (no CDN).
func TestStaticFetchesNothingOutside(t *testing.T) {
	count := 0
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		count++
		b, err := fs.ReadFile(files, p)
		if err != nil {
			return err
		}
		for _, u := range absURL.FindAllString(string(b), -1) {
			assert.True(t, namespaces[u], "%s refers to another origin: %q", p, u)
		}
		return nil
	})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, count, 6)
}

// TestAbsURLCatchesOrigins keeps the check above honest: it must see the
// usual ways of pulling in a file from elsewhere.
func TestAbsURLCatchesOrigins(t *testing.T) {
	for _, s := range []string{
		`<script src="https://cdn.example.com/x.js">`,
		`<link href="//fonts.example.com/css">`,
		`@import url(//cdn.example.com/a.css);`,
		`new WebSocket("wss://elsewhere.example/ws")`,
		`fetch('http://10.0.0.1/api')`,
	} {
		assert.NotEmpty(t, absURL.FindAllString(s, -1), s)
	}
	for _, s := range []string{`new URL('/ws', location.href)`, `u.protocol = 'wss:'`, `// a comment`, `a // b`} {
		assert.Empty(t, absURL.FindAllString(s, -1), s)
	}
}
