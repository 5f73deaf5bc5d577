package transport

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/presenced/presenced/presence"
)

// Outbound frames the Hub builds itself, in the field order of the
// protocol; presence frames come from the presence package.
type (
	welcomeFrame struct {
		Type      string `json:"type"`
		UID       string `json:"uid"`
		TimeoutMS int64  `json:"timeout_ms"`
	}
	errorFrame struct {
		Type    string `json:"type"`
		Error   string `json:"error"`
		Channel string `json:"channel,omitempty"`
	}
)

var pongMsg = []byte(`{"type":"pong"}`)

// MaxWatch is the most user IDs a watch frame may name.
const MaxWatch = presence.DefaultMaxWatch

// inbound is a client frame, checked: Type is one the Hub handles and the
// fields it needs are there and valid.
type inbound struct {
	Type    string
	Channel string
	Text    string
	UIDs    []string
}

// wireFrame is every field a client frame may carry; unknown fields are
// ignored so clients can add their own.
type wireFrame struct {
	Type    *string   `json:"type"`
	Channel *string   `json:"channel"`
	Text    *string   `json:"text"`
	UIDs    *[]string `json:"uids"`
}

// parseFrame reads one text frame. Its errors are meant for the client's
// developer: they name the field and what it must be, never a Go type.
func parseFrame(data []byte) (inbound, error) {
	var w wireFrame
	if err := json.Unmarshal(data, &w); err != nil {
		return inbound{}, jsonError(err)
	}
	if w.Type == nil || *w.Type == "" {
		return inbound{}, errors.New(`missing "type"`)
	}
	in := inbound{Type: *w.Type}
	switch in.Type {
	case "ping", "silence":
	case "join", "leave", "chat":
		if w.Channel == nil || *w.Channel == "" {
			return inbound{}, fmt.Errorf(`%s needs a "channel"`, in.Type)
		}
		in.Channel = *w.Channel
		if !presence.ValidChannel(in.Channel) {
			return in, presence.ErrInvalidChannel
		}
		if in.Type == "chat" {
			if w.Text == nil || *w.Text == "" {
				return in, errors.New(`chat needs a non-empty "text"`)
			}
			in.Text = *w.Text
		}
	case "watch":
		if w.UIDs == nil {
			return inbound{}, errors.New(`watch needs "uids", an array of user IDs`)
		}
		if len(*w.UIDs) > MaxWatch {
			return inbound{}, fmt.Errorf("watch list too long: at most %d user IDs", MaxWatch)
		}
		for _, uid := range *w.UIDs {
			if !ValidUID(uid) {
				return inbound{}, fmt.Errorf("invalid user ID %q in \"uids\"", truncate(uid))
			}
		}
		in.UIDs = *w.UIDs
	default:
		return inbound{}, fmt.Errorf("unknown type %q", truncate(in.Type))
	}
	return in, nil
}

// jsonError says what was wrong with a frame in the protocol's words.
func jsonError(err error) error {
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		want := map[string]string{"type": "a string", "channel": "a string", "text": "a string", "uids": "an array of strings"}
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

func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}

func errorMsg(msg, channel string) []byte {
	return mustJSON(errorFrame{Type: "error", Error: msg, Channel: channel})
}

// mustJSON marshals the frame types above, which cannot fail: their fields are
// strings and ints.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("transport: marshal %T: %v", v, err))
	}
	return b
}
