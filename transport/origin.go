package transport

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode"
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
	_, ok := p.match(r)
	return ok
}

// match reports whether r comes from the same host or an allowed origin,
// and returns that origin as it may be echoed (lower case): an Origin that
// is not exactly scheme://host[:port] is refused, whatever its host.
func (p *originPolicy) match(r *http.Request) (string, bool) {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return "", true
	}
	scheme, host, ok := parseOrigin(origin)
	if !ok {
		return "", false
	}
	canon := scheme + "://" + host
	if p.any || host == strings.ToLower(r.Host) || p.origins[canon] || p.hosts[host] {
		return canon, true
	}
	return "", false
}

// parseOrigin splits an Origin header, lower-cased, if it is exactly
// scheme://host[:port]: no path, query, fragment, user info or trailing dot.
func parseOrigin(origin string) (scheme, host string, ok bool) {
	scheme, host, ok = strings.Cut(strings.ToLower(origin), "://")
	if !ok || !validScheme(scheme) || checkHostPort(host) != nil || strings.HasSuffix(hostName(host), ".") {
		return "", "", false
	}
	return scheme, host, true
}

// CheckOrigin reports whether s is an entry Config.Origins understands: "*",
// a full origin (scheme://host[:port], nothing after it but an optional "/")
// or a host[:port]. New refuses a Config with another.
func CheckOrigin(s string) error {
	if s == "*" {
		return nil
	}
	if strings.ContainsFunc(s, unicode.IsSpace) {
		return errors.New("has a space; separate origins with commas")
	}
	hostport := s
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		if !validScheme(scheme) {
			return errors.New("want scheme://host[:port], such as https://app.example.com")
		}
		hostport = strings.TrimSuffix(rest, "/")
	}
	return checkHostPort(hostport)
}

// checkHostPort reports whether s is a host with an optional port, and
// nothing else: no path, query, fragment or user info.
func checkHostPort(s string) error {
	if s == "" {
		return errors.New("no host")
	}
	if strings.ContainsAny(s, "/?#@\\") {
		return errors.New("an origin is scheme://host[:port], with no path, query or user")
	}
	u, err := url.Parse("http://" + s)
	if err != nil || u.Host != s || u.Hostname() == "" {
		return errors.New("not a host[:port]")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return errors.New("bad port")
		}
	} else if strings.HasSuffix(s, ":") {
		return errors.New("bad port")
	}
	return nil
}

func validScheme(s string) bool {
	if s == "" || !('a' <= s[0] && s[0] <= 'z' || 'A' <= s[0] && s[0] <= 'Z') {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool {
		return !(r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("+-.", r)))
	})
}
