package web_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/web/internal/jsbundle"
)

// TestClientIsBuilt: client/presenced.js is what the modules in client/src
// build, so that an edit of one is not lost or left out of the other.
func TestClientIsBuilt(t *testing.T) {
	want, err := jsbundle.Client(os.DirFS(filepath.Join("client", "src")))
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join("client", "presenced.js"))
	require.NoError(t, err)
	require.True(t, string(want) == string(got),
		"client/presenced.js is not what client/src builds: edit the modules in client/src, then run go generate ./web")
}
