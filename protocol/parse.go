package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// clientJSON is every field a client frame of this protocol may carry;
// unknown fields are ignored so clients can add their own.
type clientJSON struct {
	Type    *string         `json:"type"`
	Channel *string         `json:"channel"`
	Text    *string         `json:"text"`
	UIDs    *[]string       `json:"uids"`
	Token   *string         `json:"token"`
	State   *string         `json:"state"`
	Ref     json.RawMessage `json:"ref"`
}

// ParseClient reads one text frame a client sent and checks that the fields
// its type needs are there and valid. A type this protocol does not define
// comes back as a Custom frame, its fields unread. The errors are meant for
// the client's developer: they name the field and what it must be, never a
// Go type.
func ParseClient(data []byte) (Frame, error) {
	var head struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, JSONError(err)
	}
	if head.Type == nil || *head.Type == "" {
		return nil, errors.New(`missing "type"`)
	}
	switch *head.Type {
	case "ping", "silence", "join", "leave", "chat", "watch", "refresh", "activity", "typing":
	case "members":
		return parseMembers(data)
	case "set":
		return parseSet(data)
	default:
		return Custom{Kind: *head.Type, Raw: data}, nil
	}
	var w clientJSON
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, JSONError(err)
	}
	switch typ := *w.Type; typ {
	case "ping":
		return Ping{}, nil
	case "silence":
		return Silence{}, nil
	case "activity":
		if w.State == nil || (*w.State != "away" && *w.State != "active") {
			return nil, errors.New(`activity needs "state": "away" or "active"`)
		}
		return Activity{State: *w.State}, nil
	case "join", "leave", "chat", "typing":
		if w.Channel == nil || *w.Channel == "" {
			return nil, fmt.Errorf(`%s needs a "channel"`, typ)
		}
		ch := *w.Channel
		if !ValidChannel(ch) {
			return nil, ErrInvalidChannel
		}
		switch typ {
		case "join":
			return Join{Channel: ch}, nil
		case "leave":
			return Leave{Channel: ch}, nil
		case "typing":
			return Typing{Channel: ch}, nil
		}
		if w.Text == nil || *w.Text == "" {
			return nil, errors.New(`chat needs a non-empty "text"`)
		}
		return Chat{Channel: ch, Text: *w.Text, Ref: w.Ref}, nil
	case "watch":
		if w.UIDs == nil {
			return nil, errors.New(`watch needs "uids", an array of user IDs`)
		}
		if len(*w.UIDs) > MaxWatch {
			return nil, fmt.Errorf("watch list too long: at most %d user IDs", MaxWatch)
		}
		for _, uid := range *w.UIDs {
			if !ValidUID(uid) {
				return nil, fmt.Errorf("invalid user ID %q in \"uids\"", Truncate(uid))
			}
		}
		return Watch{UIDs: *w.UIDs}, nil
	default: // "refresh"
		if w.Token == nil || *w.Token == "" {
			return nil, errors.New(`refresh needs a "token"`)
		}
		return Refresh{Token: *w.Token}, nil
	}
}

// Limits of a page of members.
const (
	DefaultPageLimit = 100  // members in a page whose request sets no limit
	MaxPageLimit     = 1000 // most members in one page
)

// parseMembers reads a members frame: "channel" required, "after" a user ID
// or "" (absent: ""), "limit" 1 to MaxPageLimit (absent: DefaultPageLimit).
func parseMembers(data []byte) (Frame, error) {
	var w struct {
		Channel *string         `json:"channel"`
		After   json.RawMessage `json:"after"`
		Limit   json.RawMessage `json:"limit"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, JSONError(err)
	}
	if w.Channel == nil || *w.Channel == "" {
		return nil, errors.New(`members needs a "channel"`)
	}
	if !ValidChannel(*w.Channel) {
		return nil, ErrInvalidChannel
	}
	f := Members{Channel: *w.Channel, Limit: DefaultPageLimit}
	if !absent(w.After) {
		if err := json.Unmarshal(w.After, &f.After); err != nil {
			return nil, errors.New(`invalid frame: "after" must be a string, a user ID or ""`)
		}
		if f.After != "" && !ValidUID(f.After) {
			return nil, fmt.Errorf(`invalid user ID %q in "after": 1 to 64 letters, digits or _.-@, or "" for the first page`, Truncate(f.After))
		}
	}
	if !absent(w.Limit) {
		if err := json.Unmarshal(w.Limit, &f.Limit); err != nil || f.Limit < 1 || f.Limit > MaxPageLimit {
			return nil, fmt.Errorf(`members "limit" must be a whole number from 1 to %d`, MaxPageLimit)
		}
	}
	return f, nil
}

// absent reports whether a field was left out or null.
func absent(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// JSONError says what was wrong with a JSON document a client sent, in the
// protocol's words rather than Go's.
func JSONError(err error) error {
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		want := map[string]string{"type": "a string", "channel": "a string", "text": "a string", "uids": "an array of strings", "token": "a string", "state": "a string"}
		field, _, _ := strings.Cut(te.Field, ".") // "uids.0" is an element
		if w, ok := want[field]; ok {
			return fmt.Errorf("invalid frame: %q must be %s", field, w)
		}
		if field == "" {
			return errors.New("invalid frame: a frame is a JSON object")
		}
		return fmt.Errorf("invalid frame: wrong kind of value for %q", field)
	}
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return fmt.Errorf("invalid JSON at byte %d: %s", se.Offset, se.Error())
	}
	return errors.New("invalid JSON: " + err.Error())
}

// serverFrames makes an empty frame of each type the server sends.
var serverFrames = map[string]func() Frame{
	"welcome":  func() Frame { return new(Welcome) },
	"pong":     func() Frame { return new(Pong) },
	"close":    func() Frame { return new(Close) },
	"error":    func() Frame { return new(Error) },
	"joined":   func() Frame { return new(Joined) },
	"left":     func() Frame { return new(Left) },
	"presence": func() Frame { return new(Presence) },
	"watching": func() Frame { return new(Watching) },
	"status":   func() Frame { return new(Status) },
	"chat":     func() Frame { return new(Chat) },
	"publish":  func() Frame { return new(Publish) },
	"message":  func() Frame { return new(Message) },
	"members":  func() Frame { return new(MembersPage) },
	"typing":   func() Frame { return new(TypingUsers) },
}

// ParseServer reads one text frame the server sent, as a client does.
// It returns a pointer to the frame's type, such as *Joined; a type the
// protocol does not define is an error.
func ParseServer(data []byte) (Frame, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("protocol: server frame: %w", err)
	}
	mk, ok := serverFrames[head.Type]
	if !ok {
		return nil, fmt.Errorf("protocol: server frame of unknown type %q", Truncate(head.Type))
	}
	f := mk()
	if err := json.Unmarshal(data, f); err != nil {
		return nil, fmt.Errorf("protocol: %s frame: %w", head.Type, err)
	}
	return f, nil
}
