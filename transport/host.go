package transport

import (
	"errors"
	"net"
	"net/http"
	"strings"
)

// hostPolicy decides which Host names the Hub answers to. A page on any
// web site can make a browser send requests to a server on the visitor's
// machine under the site's own name, once that name resolves to 127.0.0.1
// (DNS rebinding): the browser then takes the server for the site's own
// host, and an Origin check never sees a foreign origin. Only the Host
// header tells, so in demo mode, where anyone may act as anyone, the Hub
// answers only localhost names, IP literals and the hosts it was told of
// (Config.Hosts and the hosts of Config.Origins). With authentication on
// it checks only when Config.Hosts is set. The health checks answer any
// Host: they tell nothing of anyone, and probes name servers as they like.
type hostPolicy struct {
	on    bool
	hosts map[string]bool // lower-case host names, without port
}

func newHostPolicy(demo bool, hosts, origins []string) *hostPolicy {
	p := &hostPolicy{on: demo || len(hosts) > 0, hosts: map[string]bool{}}
	for _, h := range hosts {
		if name := hostName(strings.TrimSpace(h)); name != "" {
			p.hosts[name] = true
		}
	}
	for _, o := range origins {
		o = strings.TrimSpace(o)
		if _, rest, ok := strings.Cut(o, "://"); ok {
			o = strings.TrimSuffix(rest, "/")
		}
		if name := hostName(o); name != "" && name != "*" {
			p.hosts[name] = true
		}
	}
	return p
}

// hostName returns the lower-case host name of a host[:port], without
// brackets; "" if it has none.
func hostName(hostport string) string {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	return strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
}

// allow reports whether the Hub answers to r's Host.
func (p *hostPolicy) allow(r *http.Request) bool {
	if !p.on {
		return true
	}
	name := hostName(r.Host)
	switch {
	case name == "" || strings.HasSuffix(name, "."):
		return false
	case name == "localhost" || strings.HasSuffix(name, ".localhost"):
		return true
	case net.ParseIP(name) != nil:
		return true
	}
	return p.hosts[name]
}

// CheckHost reports whether s is an entry Config.Hosts understands: a host
// name or address, with an optional port. New refuses a Config with another.
func CheckHost(s string) error {
	if strings.Contains(s, "://") || checkHostPort(s) != nil {
		return errors.New("want a host name, such as chat.example.com, with an optional :port")
	}
	return nil
}
