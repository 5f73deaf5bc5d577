package transport

import (
	"errors"
	"net"
	"net/http"
	"strings"
)

// An access is what a path tells, and so what a request needs to be
// answered there. Every path the Hub serves, and the embedder's paths it
// guards (Public, RequireKey), asks admit: one rule for all of them.
type access int

const (
	// accessPublic: the page and its docs, the socket, the heartbeat, the
	// ring's shape. Only the Host check; a user's identity is the
	// handler's to check.
	accessPublic access = iota
	// accessHealth: /healthz and /readyz tell of nobody; any Host, so
	// probes may name the server as they like.
	accessHealth
	// accessKey: the server API, and the counts (/metrics, the ring's due
	// counts), which count invisible users too and so tell what the
	// keyless API hides.
	accessKey
)

// admit applies the rule of a to r: the status and message of its
// refusal, or 0 when r may go on. The Host check comes first, so a
// rebinding page learns nothing, not even whether a key would do. With an
// API key, accessKey needs it; without one, accessKey is open in demo mode
// (where anyone may be anyone, there is no one to hide) and off otherwise:
// no key does not mean demo mode.
func (h *Hub) admit(r *http.Request, a access) (int, string) {
	if a == accessHealth {
		return 0, ""
	}
	if !h.hosts.allow(r) {
		return http.StatusForbidden, "host not allowed: this server answers localhost, IP addresses and the hosts it was given (-hosts)"
	}
	if a == accessPublic {
		return 0, ""
	}
	switch {
	case h.apiKey != "":
		if !h.keyed(r) {
			return http.StatusUnauthorized, "this path needs Authorization: apikey <key>"
		}
	case !h.demo:
		return http.StatusForbidden, "off without an API key: presence is not public when users sign in (start the server with one)"
	}
	return 0, ""
}

// allowed reports whether r may have what a path of access a serves,
// answering the refusal itself when it may not.
func (h *Hub) allowed(w http.ResponseWriter, r *http.Request, a access) bool {
	status, msg := h.admit(r, a)
	if status == 0 {
		return true
	}
	writeError(w, status, msg)
	return false
}

// Public guards next, such as the demo page or the docs, as the Hub
// guards its own public paths: a request for a Host the Hub does not
// answer to gets 403 (see Config.Hosts), any other gets through.
func (h *Hub) Public(next http.Handler) http.Handler {
	return h.guard(accessPublic, next)
}

// RequireKey guards next, such as a Prometheus handler, as the Hub guards
// its own counts and the server API: the Host check first; then, with an
// API key, only requests that present it get through (401 otherwise);
// without one, everyone in demo mode and nobody otherwise (403). Counts
// include the invisible users, so a keyless reader could tell them apart
// from the visible ones the keyless API lists.
func (h *Hub) RequireKey(next http.Handler) http.Handler {
	return h.guard(accessKey, next)
}

func (h *Hub) guard(a access, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.allowed(w, r, a) {
			next.ServeHTTP(w, r)
		}
	})
}

// withoutAddresses is err's text with the network errors in it said
// without their addresses: what failed (dial tcp: connect: connection
// refused), not where.
func withoutAddresses(err error) string {
	msg := err.Error()
	var walk func(error)
	walk = func(e error) {
		switch e := e.(type) {
		case nil:
			return
		case *net.OpError:
			said := e.Op
			if e.Net != "" {
				said += " " + e.Net
			}
			if e.Err != nil {
				said += ": " + withoutAddresses(e.Err)
			}
			msg = strings.ReplaceAll(msg, e.Error(), said)
			return
		case *net.DNSError:
			said := "lookup: " + e.Err
			if e.IsNotFound {
				said = "lookup: no such host"
			}
			msg = strings.ReplaceAll(msg, e.Error(), said)
			return
		case *net.AddrError:
			msg = strings.ReplaceAll(msg, e.Error(), e.Err)
			return
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				walk(inner)
			}
			return
		}
		walk(errors.Unwrap(e))
	}
	walk(err)
	return msg
}

// mayJoin reports whether the user of s may join channel: its token's
// channels claim and the embedder's Authorize must both say yes.
func (h *Hub) mayJoin(s Session, channel string) bool {
	return s.Allows(channel) && (h.authorize == nil || h.authorize(s.UID, channel))
}

// mayWatch reports whether the user of s may watch target: as
// Config.AuthorizeWatch says or, without it, everyone in demo mode and
// else the watch claim.
func (h *Hub) mayWatch(s Session, target string) bool {
	switch {
	case h.authorizeWatch != nil:
		return h.authorizeWatch(s.UID, target)
	case h.demo:
		return true
	}
	return s.MayWatch(target)
}
