package protocol

import (
	"encoding/json"
	"fmt"
)

// A Frame is one frame of the protocol, either direction. Type is its
// "type"; its other fields are the struct's JSON fields.
type Frame interface {
	Type() string
}

// Frame types a client sends.
type (
	// Ping asks for a Pong; like every frame, it is also a keepalive.
	Ping struct{}
	// Join joins a channel; the answer is Joined, or Error.
	Join struct {
		Channel string `json:"channel"`
	}
	// Leave leaves a channel; the answer is Left.
	Leave struct {
		Channel string `json:"channel"`
	}
	// Watch replaces the connection's watch list; the answer is Watching.
	Watch struct {
		UIDs []string `json:"uids"`
	}
	// Refresh extends the connection's session with a newer token.
	Refresh struct {
		Token string `json:"token"`
	}
	// Members asks for a page of a joined channel's members: up to Limit
	// IDs after After ("": from the first), in ascending order. The answer
	// is a MembersPage, or Error.
	Members struct {
		Channel string `json:"channel"`
		After   string `json:"after"`
		Limit   int    `json:"limit"`
	}
	// Activity sets the connection's activity: State is "away" or
	// "active". It has no answer.
	Activity struct {
		State string `json:"state"`
	}
	// Typing marks the user typing in a joined channel for a while; the
	// channel's members hear of it in TypingUsers frames.
	Typing struct {
		Channel string `json:"channel"`
	}
	// Silence (demo mode only) stops the connection's control frames from
	// counting as keepalives until its next data frame.
	Silence struct{}
	// Custom is a client frame of a type the protocol does not define: the
	// application's, passed on whole.
	Custom struct {
		Kind string          `json:"-"`
		Raw  json.RawMessage `json:"-"`
	}
)

// Frame types the server sends.
type (
	// Welcome is the first frame on every connection.
	Welcome struct {
		UID       string `json:"uid"`
		TimeoutMS int64  `json:"timeout_ms"`
		Protocol  string `json:"protocol,omitempty"` // the server's Version
		Mode      string `json:"mode,omitempty"`     // the user's own mode, when set
		Note      *Note  `json:"note,omitempty"`     // the user's own note, when set
		// Session names a Server-Sent Events connection, for the POSTs
		// that carry its client's frames: a capability, only on that
		// transport.
		Session string `json:"session,omitempty"`
	}
	// Close is the last event of a Server-Sent Events stream the server
	// ends: the code and reason a WebSocket's close frame would carry.
	Close struct {
		Code   int    `json:"code"`
		Reason string `json:"reason"`
	}
	// Pong answers Ping.
	Pong struct{}
	// Error refuses a frame; Channel names the channel it was about, if any,
	// and Ref echoes the refused frame's "ref", if it had one.
	Error struct {
		Error   string          `json:"error"`
		Channel string          `json:"channel,omitempty"`
		Ref     json.RawMessage `json:"ref,omitempty"`
	}
	// Joined is a channel's snapshot: Count is exact, Members sorted and
	// possibly cut short; Away lists those of Members who are away, Users
	// the records of those of Members that have one. Mode is "invisible"
	// when the connection's own user is.
	Joined struct {
		Channel string            `json:"channel"`
		Count   int               `json:"count"`
		Members []string          `json:"members"`
		Away    []string          `json:"away,omitempty"`
		Users   map[string]Record `json:"users,omitempty"`
		Mode    string            `json:"mode,omitempty"`
	}
	// MembersPage answers Members: Count is exact, Members sorted, and Next,
	// set when more members follow, is the After of the next page.
	// Away lists those of Members who are away.
	MembersPage struct {
		Channel string            `json:"channel"`
		Count   int               `json:"count"`
		Members []string          `json:"members"`
		Away    []string          `json:"away,omitempty"`
		Users   map[string]Record `json:"users,omitempty"`
		Next    string            `json:"next,omitempty"`
	}
	// Left confirms a Leave.
	Left struct {
		Channel string `json:"channel"`
	}
	// Presence is a channel's diff over one tick. Away lists the members
	// who turned away in the tick (a user who joins away is in Joins and
	// Away), Active those back from away. CountOnly marks a big channel's
	// diff, which carries no lists. Users holds the records of those in
	// Joins that have one, Updated the new records of members whose record
	// changed in the tick (an empty one when it became empty).
	Presence struct {
		Channel   string
		Count     int
		Joins     []string
		Leaves    []string
		Away      []string
		Active    []string
		Users     map[string]Record
		Updated   map[string]Record
		CountOnly bool
	}
	// TypingUsers tells a channel's members who is typing there now: at
	// most MaxTypingListed users, sorted, and Count when there are more.
	// An empty Users means nobody is.
	TypingUsers struct {
		Channel string   `json:"channel"`
		Users   []string `json:"users"`
		Count   int      `json:"count,omitempty"`
	}
	// Watching answers Watch: the watched users online now, those of them
	// who are away, the records of those of them that have one, and for
	// the watched users offline, when they went (Unix milliseconds), where
	// that is known.
	Watching struct {
		Online   []string          `json:"online"`
		Away     []string          `json:"away,omitempty"`
		Users    map[string]Record `json:"users,omitempty"`
		LastSeen map[string]int64  `json:"last_seen,omitempty"`
	}
	// Status reports watched users' edges over one tick: Away, Active,
	// Users and Updated are like a Presence diff's, Users for Online.
	// LastSeen holds, for each user in Offline, when it went offline (Unix
	// milliseconds).
	Status struct {
		Online   []string          `json:"online"`
		Offline  []string          `json:"offline"`
		Away     []string          `json:"away,omitempty"`
		Active   []string          `json:"active,omitempty"`
		Users    map[string]Record `json:"users,omitempty"`
		Updated  map[string]Record `json:"updated,omitempty"`
		LastSeen map[string]int64  `json:"last_seen,omitempty"`
	}
	// Publish carries a message the server side published to a channel.
	Publish struct {
		Channel string          `json:"channel"`
		Data    json.RawMessage `json:"data"`
	}
	// Message carries a message the server side sent to one user.
	Message struct {
		Data json.RawMessage `json:"data"`
	}
)

// Chat is a chat line, both ways: a client sends it without From, and the
// server fans it out with From set to the sender. Ref, any JSON value a
// client may add, comes back in the error frame if the chat is not
// delivered; it is never fanned out.
type Chat struct {
	Channel string          `json:"channel"`
	From    string          `json:"from,omitempty"`
	Text    string          `json:"text"`
	Ref     json.RawMessage `json:"-"`
}

func (Ping) Type() string     { return "ping" }
func (Join) Type() string     { return "join" }
func (Leave) Type() string    { return "leave" }
func (Watch) Type() string    { return "watch" }
func (Refresh) Type() string  { return "refresh" }
func (Silence) Type() string  { return "silence" }
func (Activity) Type() string { return "activity" }
func (c Custom) Type() string { return c.Kind }
func (Welcome) Type() string  { return "welcome" }
func (Pong) Type() string     { return "pong" }
func (Close) Type() string    { return "close" }
func (Error) Type() string    { return "error" }
func (Joined) Type() string   { return "joined" }
func (Left) Type() string     { return "left" }
func (Presence) Type() string { return "presence" }
func (Watching) Type() string { return "watching" }
func (Status) Type() string   { return "status" }
func (Publish) Type() string  { return "publish" }
func (Message) Type() string  { return "message" }
func (Chat) Type() string     { return "chat" }

// Typing, both ways: a client says it types, the server says who does.
func (Typing) Type() string      { return "typing" }
func (TypingUsers) Type() string { return "typing" }

// Paging a channel's members: the request and its answer share a type.
func (Members) Type() string     { return "members" }
func (MembersPage) Type() string { return "members" }

// presenceJSON is Presence on the wire: both lists, or neither.
type presenceJSON struct {
	Channel string            `json:"channel"`
	Count   int               `json:"count"`
	Joins   *[]string         `json:"joins,omitempty"`
	Leaves  *[]string         `json:"leaves,omitempty"`
	Away    []string          `json:"away,omitempty"`
	Active  []string          `json:"active,omitempty"`
	Users   map[string]Record `json:"users,omitempty"`
	Updated map[string]Record `json:"updated,omitempty"`
}

// MarshalJSON writes the lists as arrays, empty ones included, unless the
// diff is count-only.
func (p Presence) MarshalJSON() ([]byte, error) {
	w := presenceJSON{Channel: p.Channel, Count: p.Count}
	if !p.CountOnly {
		joins, leaves := orEmpty(p.Joins), orEmpty(p.Leaves)
		w.Joins, w.Leaves = &joins, &leaves
		w.Away, w.Active, w.Users, w.Updated = p.Away, p.Active, p.Users, p.Updated
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads a diff without lists as count-only.
func (p *Presence) UnmarshalJSON(data []byte) error {
	var w presenceJSON
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*p = Presence{Channel: w.Channel, Count: w.Count, Away: w.Away, Active: w.Active, Users: w.Users, Updated: w.Updated, CountOnly: w.Joins == nil && w.Leaves == nil}
	if w.Joins != nil {
		p.Joins = *w.Joins
	}
	if w.Leaves != nil {
		p.Leaves = *w.Leaves
	}
	return nil
}

// MarshalJSON writes the lists as arrays, empty ones included.
func (s Status) MarshalJSON() ([]byte, error) {
	type plain Status
	s.Online, s.Offline = orEmpty(s.Online), orEmpty(s.Offline)
	return json.Marshal(plain(s))
}

// MarshalJSON writes the list as an array, empty or not.
func (w Watching) MarshalJSON() ([]byte, error) {
	type plain Watching
	w.Online = orEmpty(w.Online)
	return json.Marshal(plain(w))
}

// MarshalJSON writes the list as an array, empty or not.
func (j Joined) MarshalJSON() ([]byte, error) {
	type plain Joined
	j.Members = orEmpty(j.Members)
	return json.Marshal(plain(j))
}

// MarshalJSON writes the list as an array, empty or not.
func (t TypingUsers) MarshalJSON() ([]byte, error) {
	type plain TypingUsers
	t.Users = orEmpty(t.Users)
	return json.Marshal(plain(t))
}

// MarshalJSON writes the list as an array, empty or not.
func (p MembersPage) MarshalJSON() ([]byte, error) {
	type plain MembersPage
	p.Members = orEmpty(p.Members)
	return json.Marshal(plain(p))
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Encoded is a frame encoded once, to be sent to any number of connections.
type Encoded struct {
	Type string // the frame's "type", for counting without reading Data
	Data []byte // the JSON text
}

// Encode returns f's JSON text, "type" first. The frames of this package
// hold strings, numbers and data already checked to be JSON, so Encode
// fails only on a Custom frame or a Publish or Message whose Data is not
// valid JSON.
func Encode(f Frame) (Encoded, error) {
	typ := f.Type()
	if c, ok := f.(Custom); ok {
		return Encoded{Type: typ, Data: c.Raw}, nil
	}
	body, err := json.Marshal(f)
	if err != nil {
		return Encoded{}, fmt.Errorf("protocol: encode %s frame: %w", typ, err)
	}
	typeJSON, err := json.Marshal(typ)
	if err != nil {
		return Encoded{}, fmt.Errorf("protocol: encode %s frame: %w", typ, err)
	}
	// body is an object: splice "type" in as its first member.
	out := make([]byte, 0, len(`{"type":,`)+len(typeJSON)+len(body))
	out = append(out, `{"type":`...)
	out = append(out, typeJSON...)
	if len(body) > 2 {
		out = append(out, ',')
	}
	out = append(out, body[1:]...)
	return Encoded{Type: typ, Data: out}, nil
}

// MustEncode is Encode for frames that cannot fail to encode: every frame
// type of this package but Custom, Publish and Message, whose data the
// caller checked.
func MustEncode(f Frame) Encoded {
	e, err := Encode(f)
	if err != nil {
		panic(err)
	}
	return e
}
