package transport

import (
	"net/http"
	"net/url"
	"strings"
)

// originPolicy decides which browser origins may use the Hub. Requests
// without an Origin header (non-browser clients) are always allowed: the
// check exists to stop other web sites from acting with a visitor's
// credentials, which only browsers carry.
type originPolicy struct {
	any     bool
	origins map[string]bool // lower-case "scheme://host[:port]"
	hosts   map[string]bool // lower-case "host[:port]"
}

// newOriginPolicy builds a policy from allow-list entries: "*" (any origin),
// a full origin such as "https://app.example.com", or a bare host such as
// "app.example.com:8443" (any scheme).
func newOriginPolicy(allowed []string) *originPolicy {
	p := &originPolicy{origins: map[string]bool{}, hosts: map[string]bool{}}
	for _, a := range allowed {
		a = strings.ToLower(strings.TrimRight(strings.TrimSpace(a), "/"))
		switch {
		case a == "":
		case a == "*":
			p.any = true
		case strings.Contains(a, "://"):
			p.origins[a] = true
		default:
			p.hosts[a] = true
		}
	}
	return p
}

// allow reports whether r comes from the same host or an allowed origin.
func (p *originPolicy) allow(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || p.any {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	host := strings.ToLower(u.Host)
	if host == strings.ToLower(r.Host) {
		return true
	}
	return p.origins[strings.ToLower(u.Scheme)+"://"+host] || p.hosts[host]
}
