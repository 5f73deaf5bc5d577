package jsbundle

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func files(m map[string]string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for name, src := range m {
		fsys[name] = &fstest.MapFile{Data: []byte(src)}
	}
	return fsys
}

// TestBundle: each module after those it imports (b imports a, so a comes
// first though the entry names b first), imports taken out, export kept
// only in the entry, its re-exports made local.
func TestBundle(t *testing.T) {
	fsys := files(map[string]string{
		"main.js": "// main: the entry.\n\nimport { b } from './b.js';\nimport { a } from './a.js';\nexport { A } from './a.js';\n\nexport function main() { return a() + b; }\n",
		"a.js":    "// a: the first.\n\nexport const A = 1;\nexport function a() { return A; }\n",
		"b.js":    "// b: the second, on a.\nimport { A } from './a.js';\n\nconst own = 2;\nexport const b = A + own;\n",
	})
	out, err := Bundle(fsys, "main.js", "Built.\nBy us.")
	require.NoError(t, err)
	assert.Equal(t, `// main: the entry.
//
// Built.
// By us.

// ---- a.js ----
// a: the first.

const A = 1;
function a() { return A; }

// ---- b.js ----
// b: the second, on a.

const own = 2;
const b = A + own;

// ---- main.js ----

export { A };

export function main() { return a() + b; }
`, string(out))
}

// TestBundleRefuses: what concatenation would get wrong fails the build.
func TestBundleRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		mods map[string]string
		err  string
	}{
		{"a name declared twice", map[string]string{
			"main.js": "// m\nimport { x } from './a.js';\nconst y = 1;\nexport const z = x + y;\n",
			"a.js":    "// a\nconst y = 2;\nexport const x = y;\n",
		}, "main.js: declares y, as a.js does"},
		{"a name not exported", map[string]string{
			"main.js": "// m\nimport { hidden } from './a.js';\n",
			"a.js":    "// a\nconst hidden = 1;\n",
		}, "imports hidden from a.js, which does not export it"},
		{"an import with a rename", map[string]string{
			"main.js": "// m\nimport { x as y } from './a.js';\n",
			"a.js":    "// a\nexport const x = 1;\n",
		}, "main.js:2: an import other than"},
		{"an import of another package", map[string]string{
			"main.js": "// m\nimport WebSocket from 'ws';\n",
		}, "main.js:2: an import other than"},
		{"an export list outside the entry", map[string]string{
			"main.js": "// m\nimport { x } from './a.js';\n",
			"a.js":    "// a\nconst x = 1;\nexport { x };\n",
		}, "a.js:3: an export other than of a declaration"},
		{"a cycle", map[string]string{
			"main.js": "// m\nimport { x } from './a.js';\n",
			"a.js":    "// a\nimport { y } from './b.js';\nexport const x = 1;\n",
			"b.js":    "// b\nimport { x } from './a.js';\nexport const y = 1;\n",
		}, "a.js: imports itself"},
		{"a module that says nothing of itself", map[string]string{
			"main.js": "import { x } from './a.js';\n",
		}, "main.js: starts with no comment"},
		{"a missing module", map[string]string{
			"main.js": "// m\nimport { x } from './a.js';\n",
		}, "read module"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Bundle(files(tc.mods), "main.js", "built")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
		})
	}
}
