// Package web holds the demo page, embedded so the server needs no files on disk.
//
// The page is plain HTML, CSS and JavaScript modules with no build step, and
// it fetches nothing from another origin: it talks to the server that serves
// it, over /ws and GET /api/ring.
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// files is the page's tree, rooted at static/.
var files = func() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return sub
}()

// Handler serves the demo page and its assets. Mount it at "/": the page
// expects /ws and /api/ring on the same host.
func Handler() http.Handler {
	return http.FileServerFS(files)
}
