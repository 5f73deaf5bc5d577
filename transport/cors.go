package transport

import (
	"net/http"
	"slices"
	"strings"
)

// preflightMaxAge is how long, in seconds, a browser may reuse a
// preflight's answer: the allowed origins change only with a restart, and
// ten minutes keeps a page from paying a round trip per heartbeat.
const preflightMaxAge = "600"

// corsAllowHeaders are the request headers a page may send the API: a
// token or an API key, and the type of a JSON body.
const corsAllowHeaders = "Authorization, Content-Type"

// crossOrigin sets the CORS headers of an actual response and reports
// whether r's origin is allowed (a request without Origin is). Vary: Origin
// goes on every response, allowed or not, so that a cache never hands the
// answer meant for one page to another. There is no
// Access-Control-Allow-Credentials: identity travels in headers and the
// query, never in cookies, so a page gains nothing it could not send
// itself.
func (p *originPolicy) crossOrigin(h http.Header, r *http.Request) bool {
	h.Add("Vary", "Origin")
	origin, ok := p.match(r)
	if !ok {
		return false
	}
	if origin != "" {
		h.Set("Access-Control-Allow-Origin", origin) // the allowed origin, never the header as sent
	}
	return true
}

// CORS wraps next so that pages on the origins the Hub allows (the
// request's own host, and Config.Origins) may read what it serves: their
// Origin comes back in Access-Control-Allow-Origin, with Vary: Origin.
// Other origins get no CORS headers, so their browser keeps the answer from
// them. Wrap the JavaScript client with it, e.g.
// mux.Handle("/presenced.js", hub.CORS(web.Handler())), for a page on
// another origin to import it as an ES module.
func (h *Hub) CORS(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.origins.crossOrigin(w.Header(), r)
		next.ServeHTTP(w, r)
	})
}

// crossOriginAPI guards an endpoint of the HTTP API: a browser origin the
// Hub does not allow is refused as at /ws, before anything else (a form on
// another site can POST without a preflight), and an allowed one may read
// the answer, refusals included.
func (h *Hub) crossOriginAPI(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.origins.crossOrigin(w.Header(), r) {
			writeError(w, http.StatusForbidden, "origin not allowed")
			return
		}
		next(w, r)
	}
}

// withPreflight adds an OPTIONS route for each path of api, answering for
// the methods api serves there, and guards the others with crossOriginAPI.
func (h *Hub) withPreflight(api map[string]http.HandlerFunc) map[string]http.HandlerFunc {
	methods := map[string][]string{}
	out := make(map[string]http.HandlerFunc, 2*len(api))
	for pattern, f := range api {
		method, path, _ := strings.Cut(pattern, " ")
		methods[path] = append(methods[path], method)
		if method == http.MethodGet {
			methods[path] = append(methods[path], http.MethodHead) // the mux serves HEAD with GET
		}
		out[pattern] = h.crossOriginAPI(f)
	}
	for path, ms := range methods {
		slices.Sort(ms)
		out[http.MethodOptions+" "+path] = h.preflight(ms)
	}
	return out
}

// preflight answers OPTIONS on a path of the API that serves methods. A
// CORS preflight (Origin and Access-Control-Request-Method) from an allowed
// origin, for one of those methods, gets 204 with what the page may send;
// from another origin 403, and for another method 405, both without CORS
// headers, so the browser stops there. A plain OPTIONS gets 204 with Allow.
func (h *Hub) preflight(methods []string) http.HandlerFunc {
	allowMethods := strings.Join(methods, ", ")
	allow := strings.Join(slices.Sorted(slices.Values(append(slices.Clone(methods), http.MethodOptions))), ", ")
	return func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Add("Vary", "Origin")
		origin, method := r.Header.Get("Origin"), r.Header.Get("Access-Control-Request-Method")
		switch {
		case origin == "" || method == "":
			hd.Set("Allow", allow)
			w.WriteHeader(http.StatusNoContent)
		case !h.origins.allow(r):
			writeError(w, http.StatusForbidden, "origin not allowed")
		case !slices.Contains(methods, method):
			hd.Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, "method not allowed: "+method)
		default:
			hd.Set("Access-Control-Allow-Origin", origin)
			hd.Set("Access-Control-Allow-Methods", allowMethods)
			hd.Set("Access-Control-Allow-Headers", corsAllowHeaders)
			hd.Set("Access-Control-Max-Age", preflightMaxAge)
			w.WriteHeader(http.StatusNoContent)
		}
	}
}
