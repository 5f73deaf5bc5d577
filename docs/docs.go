// Package docs holds the machine-readable twins of protocol.md, so a
// server can serve them and a test can check traffic against them:
// openapi.yaml, an OpenAPI 3.1 description of the HTTP API, and
// schema/client-frames.json and schema/server-frames.json, JSON Schemas
// (draft 2020-12) of the WebSocket frames in each direction.
package docs

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed openapi.yaml schema/*.json
var files embed.FS

// FS holds openapi.yaml and schema/*.json.
var FS fs.FS = files

// Handler serves GET and HEAD of /openapi.yaml (application/yaml) and
// /schema/{name}.json (application/schema+json), e.g. mounted with
// mux.Handle("/openapi.yaml", docs.Handler()) and
// mux.Handle("/schema/", docs.Handler()). Anything else gets a JSON
// error, 404 or 405, like the server's other refusals.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, typ := "", ""
		switch p := r.URL.Path; {
		case p == "/openapi.yaml":
			name, typ = "openapi.yaml", "application/yaml"
		case strings.HasPrefix(p, "/schema/") && strings.HasSuffix(p, ".json") && !strings.Contains(p[len("/schema/"):], "/"):
			name, typ = p[1:], "application/schema+json"
		}
		body, err := fs.ReadFile(files, name)
		if name == "" || err != nil {
			writeError(w, http.StatusNotFound, "not found")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method not allowed")
			return
		}
		w.Header().Set("Content-Type", typ)
		w.Header().Set("Access-Control-Allow-Origin", "*") // public documents
		w.Write(body)
	})
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
