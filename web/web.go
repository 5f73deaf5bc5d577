// Package web holds the demo page, embedded so the server needs no files on disk.
//
// The page is plain HTML, CSS and JavaScript modules with no build step, and
// it fetches nothing from another origin: it talks to the server that serves
// it, over /ws, GET /api/ring and, at load without a token, a question or two
// that tell whether the server needs one (GET /api/presence?limit=0, then
// POST /api/heartbeat if that is refused).
package web

import (
	"bytes"
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"strings"
	"time"
)

// modTime is zero: embedded files have none, and http.ServeContent then
// sends no Last-Modified, as the file server does for the page.
var modTime time.Time

//go:embed static
var static embed.FS

// clientJS is the JavaScript client, web/client/presenced.js: the page's
// connections use it, and other pages may load it from /presenced.js. It is
// one file, built from the modules in web/client/src, so that whoever
// serves or copies it needs nothing beside it.
//
//go:generate go run gen_client.go
//go:embed client/presenced.js
var clientJS []byte

// files is the page's tree, rooted at static/.
var files = func() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return sub
}()

// Handler serves the demo page and its assets, and the JavaScript client at
// /presenced.js, to GET and HEAD. It knows no origins: for a page on another
// origin to import the client, serve /presenced.js through the Hub's CORS,
// which knows the allowed ones. Mount it at
// "/": the page expects /ws and /api/ on the same host. Like the server's
// API it refuses in JSON: {"error":"not found"} with 404 for a path that
// names no file, {"error":"method not allowed"} with 405 and Allow for
// other methods.
func Handler() http.Handler {
	fileServer := http.FileServerFS(files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method not allowed")
			return
		}
		if r.URL.Path == "/presenced.js" {
			w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
			http.ServeContent(w, r, "presenced.js", modTime, bytes.NewReader(clientJS))
			return
		}
		if !exists(r.URL.Path) {
			writeError(w, http.StatusNotFound, "not found")
			return
		}
		fileServer.ServeHTTP(w, r)
	})
}

// exists reports whether urlPath names a file of the page, or the root,
// which serves index.html. Other directories are not listed.
func exists(urlPath string) bool {
	name, ok := strings.CutPrefix(urlPath, "/")
	if !ok {
		return false
	}
	if name == "" {
		name = "index.html"
	}
	if !fs.ValidPath(name) {
		return false
	}
	fi, err := fs.Stat(files, name)
	return err == nil && !fi.IsDir()
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
