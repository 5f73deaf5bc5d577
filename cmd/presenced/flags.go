package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/protocol"
	"github.com/presenced/presenced/tracker"
	"github.com/presenced/presenced/transport"
	"github.com/presenced/presenced/webhook"
)

// options are the settings of one run. Each flag sets a field of the Hub's
// config (its Node's too: transport.Config carries presence's settings), of
// the webhook's, or one of the few the command wires itself.
type options struct {
	hub     transport.Config
	webhook webhook.Config
	events  presence.LogConfig

	addr      string
	jwtSecret string
	redis     string
	node      string
	version   bool

	// addrFrom says where addr came from: "-addr", "$PRESENCED_ADDR", or
	// the default for the mode.
	addrFrom string
}

// A setting is one row of the command's table: a flag, its variable
// (envName of the flag's name), its default (what value holds before
// parsing) and its bounds. Adding a setting is a field in the library's
// Config and a row here.
type setting struct {
	name  string
	value flag.Value
	usage string
	// check reports a value the server cannot run with; nil: any value the
	// flag parses.
	check func() error
	// show is the value for the start-up line; nil: value.String().
	show func() string
	// reset sets the default; nil: the zero value is the default.
	reset func()
	// arg is the placeholder of the value in -h; "": by the value's type.
	arg string
	// flagOnly settings have no variable: PRESENCED_VERSION is many a
	// deployment's own, and -version makes the server exit.
	flagOnly bool
}

// settings is the table of flags, bound to o's fields.
func (o *options) settings() []setting {
	h, w := &o.hub, &o.webhook
	return []setting{
		{name: "addr", value: (*stringValue)(&o.addr), arg: "host:port",
			usage: "listen address (default " + demoAddr + " in demo mode, loopback only; " + authAddr + " with a key for tokens)",
			check: func() error {
				if _, _, err := net.SplitHostPort(o.addr); err != nil {
					return fmt.Errorf("-addr %q: want host:port or :port", o.addr)
				}
				return nil
			}},
		atLeast("slots", &h.Slots, tracker.DefaultSlots, 2, "ring slots; the timeout is (slots-1)*tick"),
		atLeast("tick", &h.Tick, tracker.DefaultTick, time.Millisecond, "ring step"),
		atLeast("max-message", &h.MaxMessage, transport.DefaultMaxMessage, 1, "largest inbound WebSocket frame in bytes (larger: close 1009), but for a watch frame, which may hold a full watch list too").
			saying("at least 1 byte"),
		{name: "origins", value: (*listValue)(&h.Origins),
			usage: "comma-separated browser origins allowed besides the server's own host: \"*\" (any), https://host[:port] or host[:port]",
			check: func() error {
				for _, s := range h.Origins {
					if err := transport.CheckOrigin(s); err != nil {
						return fmt.Errorf("-origins: %q: %w", s, err)
					}
				}
				return nil
			}},
		{name: "hosts", value: (*listValue)(&h.Hosts),
			usage: "comma-separated host names this server answers to besides localhost and IP addresses (and the hosts of -origins): in demo mode other Host headers get 403 (DNS rebinding); with tokens, setting it turns the check on",
			check: func() error {
				for _, s := range h.Hosts {
					if err := transport.CheckHost(s); err != nil {
						return fmt.Errorf("-hosts: %q: %w", s, err)
					}
				}
				return nil
			}},
		secret("jwt-secret", &o.jwtSecret, "HS256 secret for client tokens; with none of -jwt-secret, -jwt-public-key and -jwks-url: demo mode, ?uid= is trusted"),
		{name: "jwt-public-key", value: (*stringValue)(&h.JWT.PublicKeyFile), arg: "file",
			usage: "PEM file of the public key of client tokens: RSA (RS256 tokens) or EC P-256 (ES256)",
			check: func() error {
				if err := o.oneTokenKey(); err != nil || h.JWT.PublicKeyFile == "" {
					return err
				}
				if _, _, err := transport.NewJWTAuth(transport.JWTConfig{PublicKeyFile: h.JWT.PublicKeyFile}); err != nil {
					return fmt.Errorf("-jwt-public-key: %w", err)
				}
				return nil
			},
			show: func() string { return cmp.Or(h.JWT.PublicKeyFile, "unset") }},
		{name: "jwks-url", value: (*stringValue)(&h.JWT.JWKSURL), arg: "url",
			usage: "URL of the JSON Web Key Set of client tokens (RS256 and ES256, by kid): fetched at start, hourly, and for an unknown kid at most every 30s",
			check: o.oneTokenKey,
			show:  func() string { return redacted(h.JWT.JWKSURL, "unset") }},
		secret("api-key", &h.APIKey, "key of the server API (/api/presence, /api/channels, /api/publish, /api/send): requests need \"Authorization: apikey <key>\""),
		atLeast("grace", &h.Grace, 0, 0, "delay before a user whose last connection closed is reported offline"),
		atLeast("last-seen-ttl", &h.LastSeenTTL, presence.DefaultLastSeenTTL, time.Millisecond, "how long to remember when a user went offline (GET /api/presence/{uid}, status frames)"),
		atLeast("away-after", &h.AwayAfter, 0, 0, "mark a connection away after this long without an activity, chat, typing or join frame; 0: never"),
		{name: "webhook", value: (*stringValue)(&w.URL), arg: "url", usage: "URL to POST the presence edges this node produces to, in batches (http or https)",
			check: func() error {
				if w.URL == "" {
					return nil
				}
				if _, err := webhook.New(webhook.Config{URL: w.URL}); err != nil {
					return fmt.Errorf("-webhook: %w", err)
				}
				return nil
			},
			show: func() string { return redacted(w.URL, "unset") }},
		{name: "webhook-secret", value: (*stringValue)(&w.Secret), arg: "secret",
			usage: "key of each webhook POST's signatures: raw, or whsec_<base64> (Standard Webhooks' webhook-signature; the deprecated X-Presenced-Signature is keyed with the value as given)",
			check: func() error {
				if w.Secret == "" {
					return nil
				}
				if w.URL == "" {
					return errors.New("-webhook-secret without -webhook")
				}
				if _, err := webhook.New(webhook.Config{URL: w.URL, Secret: w.Secret}); err != nil {
					return fmt.Errorf("-webhook-secret: %w", err)
				}
				return nil
			},
			show: func() string { return setOrUnset(w.Secret) }},
		atLeast("webhook-queue", &w.Queue, webhook.DefaultQueue, 1, "most webhook events waiting while the backend is down (past it the oldest are dropped and counted)"),
		atLeast("events-keep", &o.events.Keep, presence.DefaultLogKeep, time.Second, "how long the log of edges keeps an edge, for a backend to read back (GET /api/events) after it missed webhooks"),
		atLeast("events-max", &o.events.Max, presence.DefaultLogMax, 1, "most edges the log of edges keeps (in memory, or in Redis over all shards); past it the oldest go"),
		atLeast("typing-ttl", &h.TypingTTL, presence.DefaultTypingTTL, time.Millisecond, "how long a user stays typing in a channel after its last typing frame there"),
		{name: "redis", value: (*stringValue)(&o.redis), arg: "url", usage: "Redis URL to share presence between nodes (clustering)",
			show: func() string { return redacted(o.redis, "unset: presence in memory") }},
		{name: "node", value: (*stringValue)(&o.node), arg: "name", usage: "this node's name in the cluster (default: hostname-pid)",
			show: func() string {
				switch {
				case o.node != "":
					return o.node
				case o.redis == "":
					return "unused without -redis"
				}
				return "hostname-pid"
			}},
		atLeast("member-list", &h.MemberList, presence.DefaultMemberList, 1, "most member IDs in a joined snapshot (its count is always exact)"),
		atLeast("presence-lists", &h.PresenceLists, presence.DefaultPresenceLists, 1, "above this many members a channel's presence diffs carry the count only"),
		atLeast("max-channels", &h.MaxChannels, presence.DefaultMaxChannels, 1, "most channels one connection may join"),
		atLeast("max-watch", &h.MaxWatch, protocol.MaxWatch, 1, "most user IDs in one connection's watch list").
			upTo(protocol.MaxWatch),
		atLeast("max-conns-per-user", &h.MaxConnsPerUser, transport.DefaultConnsPerUser, 1, "most WebSockets one user may hold on this node (one more: HTTP 429)"),
		atLeast("max-conns", &h.MaxConns, defaultMaxConns(), 0, "most WebSockets on this node (one more: HTTP 503 with Retry-After), so health checks, the API and Redis keep their descriptors; by default the descriptor limit less a reserve; 0: no cap").
			showing(func() string { return describeMaxConns(h.MaxConns) }),
		atLeast("frame-rate", &h.FrameRate, transport.DefaultFrameRate, 0, "frames a second one connection may send on average (over: dropped, then close 1008)").
			positive(),
		atLeast("frame-burst", &h.FrameBurst, transport.DefaultFrameBurst, 1, "frames one connection may send at once"),
		atLeast("byte-rate", &h.ByteRate, transport.DefaultByteRate, 1, "bytes a second one connection may send on average, in bursts of 16 seconds' worth"),
		atLeast("queue-bytes", &h.QueueBytes, transport.DefaultQueueBytes, 64<<10, "bytes queued for one connection before it is closed as a slow consumer (1008)").
			saying("at least 64 KiB"),
		{name: "park-readers", value: (*boolValue)(&h.ParkReaders),
			usage: "keep a goroutine per connection blocked in read instead of polling idle sockets with epoll"},
		{name: "version", value: (*boolValue)(&o.version), usage: "print the version and the protocol version, and exit", flagOnly: true,
			show: func() string { return "" }},
	}
}

// A number is a setting's type that has bounds.
type number interface {
	~int | ~int64 | ~float64
}

// atLeast is the row of a number flag with default def and least value
// least; the flag's text names the bound.
func atLeast[T number](name string, p *T, def, least T, usage string) setting {
	s := setting{name: name, value: numberValue[T]{p}, usage: usage, reset: func() { *p = def }}
	bound := "at least " + numberValue[T]{&least}.String()
	if least == 0 {
		bound = "not negative"
	}
	s.check = func() error {
		if *p < least {
			return fmt.Errorf("-%s %s: %s", name, s.value, bound)
		}
		return nil
	}
	if bound != "not negative" {
		s.usage += ", " + bound
	}
	return s
}

// saying makes s's bound read as text.
func (s setting) saying(text string) setting {
	check := s.check
	s.check = func() error {
		if err := check(); err != nil {
			return fmt.Errorf("-%s %s: %s", s.name, s.value, text)
		}
		return nil
	}
	s.usage = s.usage[:strings.LastIndex(s.usage, ", at least")] + ", " + text
	return s
}

// upTo makes s, an int, refuse more than most too.
func (s setting) upTo(most int) setting {
	v, check := s.value.(numberValue[int]), s.check
	s.check = func() error {
		if *v.p > most {
			return fmt.Errorf("-%s %d: at most %d", s.name, *v.p, most)
		}
		return check()
	}
	s.usage += fmt.Sprintf(" and at most %d", most)
	return s
}

// positive makes s, a float, refuse zero too.
func (s setting) positive() setting {
	v := s.value.(numberValue[float64])
	s.check = func() error {
		if *v.p <= 0 {
			return fmt.Errorf("-%s %s: must be positive", s.name, s.value)
		}
		return nil
	}
	s.usage += ", positive"
	return s
}

// showing gives s its value for the start-up line.
func (s setting) showing(show func() string) setting {
	s.show = show
	return s
}

// defaultMaxConns is -max-conns's default: what the process's descriptor
// limit leaves for WebSockets; 0 (no cap) on a system without one.
func defaultMaxConns() int {
	limit, err := transport.DescriptorLimit()
	if err != nil {
		return 0
	}
	return transport.MaxConnsWithin(limit)
}

// describeMaxConns is -max-conns's value for the start-up line, with the
// limit it was drawn from.
func describeMaxConns(n int) string {
	limit, err := transport.DescriptorLimit()
	switch {
	case err != nil && n == 0:
		return "0 (no cap; no descriptor limit to read)"
	case err != nil:
		return strconv.Itoa(n)
	case n == 0:
		return fmt.Sprintf("0 (no cap; descriptor limit %d)", limit)
	}
	return fmt.Sprintf("%d (descriptor limit %d)", n, limit)
}

// secret is the row of a flag that is logged as set or unset only.
func secret(name string, p *string, usage string) setting {
	return setting{name: name, value: (*stringValue)(p), usage: usage, arg: "secret", show: func() string { return setOrUnset(*p) }}
}

// envPrefix starts the environment variable of every flag: -member-list
// is also PRESENCED_MEMBER_LIST.
const envPrefix = "PRESENCED_"

// envName is the environment variable that can set the flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Default listen addresses: loopback only in demo mode, where anyone who
// can reach the port may claim any user ID.
const (
	demoAddr = "127.0.0.1:8080"
	authAddr = ":8080"
)

// parseFlags reads the command line, then the environment for each flag
// the command line did not set (PRESENCED_ADDR for -addr, and so on), and
// checks the values. Secrets are best passed in the environment, so they do
// not appear in ps. A value that does not parse, or is out of range, is an
// error naming the flag or the variable it came from; -h prints the usage
// to out and returns flag.ErrHelp.
func parseFlags(args []string, getenv func(string) string, out io.Writer) (options, error) {
	var o options
	table := o.settings()
	fs := flag.NewFlagSet("presenced", flag.ContinueOnError)
	// Quiet: a mistake is one line saying what was expected (run prints
	// it), not the whole usage.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var bad error
	for _, s := range table {
		if s.reset != nil {
			s.reset()
		}
		fs.Var(named{s.value, s.name, &bad}, s.name, s.usage)
	}
	if err := fs.Parse(args); err != nil {
		switch {
		case errors.Is(err, flag.ErrHelp):
			printUsage(out, fs, table)
		case bad != nil:
			err = bad // package flag's wording, "invalid value ... for flag", says it twice
		}
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	set, fromEnv := map[string]bool{}, map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, s := range table {
		v := getenv(envName(s.name))
		if s.flagOnly || set[s.name] || v == "" {
			continue
		}
		if err := s.value.Set(v); err != nil {
			return o, fmt.Errorf("$%s: %w", envName(s.name), err)
		}
		set[s.name], fromEnv[s.name] = true, true
		if s.name == "addr" {
			o.addrFrom = "$" + envName(s.name)
		}
	}
	switch {
	case o.version:
		return o, nil
	case o.addrFrom != "":
	case set["addr"]:
		o.addrFrom = "-addr"
	case o.demo():
		o.addr, o.addrFrom = demoAddr, "default in demo mode: loopback only"
	default:
		o.addr, o.addrFrom = authAddr, "default"
	}
	for _, s := range table {
		if s.check == nil {
			continue
		}
		if err := s.check(); err != nil {
			if fromEnv[s.name] {
				err = fromVariable(err, s.name)
			}
			return o, err
		}
	}
	return o, nil
}

// demo reports whether no flag gives a key for client tokens: clients
// then name themselves.
func (o *options) demo() bool {
	return o.jwtSecret == "" && o.hub.JWT.PublicKeyFile == "" && o.hub.JWT.JWKSURL == ""
}

// oneTokenKey refuses more than one source of token keys: whoever holds
// any of them can mint every identity.
func (o *options) oneTokenKey() error {
	n := 0
	for _, v := range []string{o.jwtSecret, o.hub.JWT.PublicKeyFile, o.hub.JWT.JWKSURL} {
		if v != "" {
			n++
		}
	}
	if n > 1 {
		return errors.New("-jwt-secret, -jwt-public-key and -jwks-url: set one")
	}
	return nil
}

// named is a flag's Value that keeps the first error it gives, prefixed
// with the flag, in *err.
type named struct {
	flag.Value
	name string
	err  *error
}

func (n named) Set(s string) error {
	err := n.Value.Set(s)
	if err != nil && *n.err == nil {
		*n.err = fmt.Errorf("-%s: %w", n.name, err)
	}
	return err
}

// IsBoolFlag lets a bool flag stand alone (-version), as package flag
// allows only for a Value that says it is one.
func (n named) IsBoolFlag() bool {
	b, ok := n.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// fromVariable is err, a check's error that starts with the flag name,
// starting with its variable instead: the operator who set
// PRESENCED_SLOTS=1 typed no -slots.
func fromVariable(err error, name string) error {
	msg := "$" + envName(name) + ": " + err.Error()
	if rest, ok := strings.CutPrefix(err.Error(), "-"+name); ok {
		msg = "$" + envName(name) + rest
	}
	return renamed{msg, err}
}

// renamed is an error said otherwise.
type renamed struct {
	msg string
	err error
}

func (r renamed) Error() string { return r.msg }
func (r renamed) Unwrap() error { return r.err }

// logAttrs are the settings in use, for the start-up line: every value of
// the table filled in, and the secrets only as set or unset.
func (o options) logAttrs(addr string, timeout time.Duration) []any {
	mode := "jwt"
	if o.demo() {
		mode = "demo"
	}
	attrs := []any{"addr", addr, "addr_from", o.addrFrom, "mode", mode, "timeout", timeout}
	for _, s := range o.settings() {
		v := s.value.String()
		if s.show != nil {
			v = s.show()
		}
		if s.name != "addr" && v != "" {
			attrs = append(attrs, strings.ReplaceAll(s.name, "-", "_"), v)
		}
	}
	return attrs
}

func setOrUnset(secret string) string {
	if secret == "" {
		return "unset"
	}
	return "set"
}

// redacted is raw with any password hidden; unset when raw is empty.
func redacted(raw, unset string) string {
	if raw == "" {
		return unset
	}
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return raw
}

// The flag.Values of the table's types. Each points at the field it sets.
type (
	stringValue string
	boolValue   bool
	listValue   []string // comma-separated, blanks dropped
)

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *stringValue) String() string {
	if v == nil {
		return ""
	}
	return string(*v)
}

func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q is not true or false", s)
	}
	*v = boolValue(b)
	return nil
}
func (v *boolValue) String() string   { return strconv.FormatBool(v != nil && bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }

func (v *listValue) Set(s string) error {
	*v = nil
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			*v = append(*v, e)
		}
	}
	return nil
}
func (v *listValue) String() string {
	if v == nil || len(*v) == 0 {
		return "same host only"
	}
	return strings.Join(*v, ",")
}

type numberValue[T number] struct{ p *T }

func (v numberValue[T]) Set(s string) error {
	var x any
	var err error
	switch any(*v.p).(type) {
	case time.Duration:
		x, err = time.ParseDuration(s)
	case float64:
		x, err = strconv.ParseFloat(s, 64)
	case int64:
		x, err = strconv.ParseInt(s, 0, 64)
	default:
		var i int64
		i, err = strconv.ParseInt(s, 0, strconv.IntSize)
		x = int(i)
	}
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return fmt.Errorf("%q is out of range", s)
		}
		return fmt.Errorf("%q is not %s", s, v.form())
	}
	*v.p = x.(T)
	return nil
}

// form says what a value of v's type looks like.
func (v numberValue[T]) form() string {
	switch any(*v.p).(type) {
	case time.Duration:
		return "a duration such as 500ms or 1s"
	case float64:
		return "a number such as 50 or 2.5"
	}
	return "a whole number such as 100"
}

func (v numberValue[T]) String() string {
	var n T // flag asks a zero Value for its zero's text
	if v.p != nil {
		n = *v.p
	}
	switch x := any(n).(type) {
	case time.Duration:
		return x.String()
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(n)
}
