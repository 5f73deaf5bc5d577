package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// The modes a user may set. ModeOnline is the default: a record never
// carries it, on the wire or off.
const (
	ModeOnline    = "online"
	ModeDND       = "dnd"
	ModeInvisible = "invisible"
)

// Limits of a user's record.
const (
	MaxInfo      = 512                // most bytes of info, compact
	MaxNoteText  = 128                // most code points of a note's text
	MaxNoteEmoji = 16                 // most code points of a note's emoji
	MaxNoteAhead = 7 * 24 * time.Hour // latest until of a note, from now
)

// A Note is a user's status note: Until, if set, is when it clears (Unix
// milliseconds).
type Note struct {
	Text  string `json:"text,omitempty"`
	Emoji string `json:"emoji,omitempty"`
	Until int64  `json:"until,omitempty"`
}

// A Record is what a user is beside online or offline: Info from the
// application, Mode ("" for online, ModeDND or ModeInvisible) and a Note.
// The zero Record is a user with none of them, written {}.
type Record struct {
	Info json.RawMessage `json:"info,omitempty"`
	Mode string          `json:"mode,omitempty"`
	Note *Note           `json:"note,omitempty"`
}

// IsZero reports whether r has no part.
func (r Record) IsZero() bool { return len(r.Info) == 0 && r.Mode == "" && r.Note == nil }

// Equal reports whether r and o say the same.
func (r Record) Equal(o Record) bool {
	if r.Mode != o.Mode || !bytes.Equal(r.Info, o.Info) || (r.Note == nil) != (o.Note == nil) {
		return false
	}
	return r.Note == nil || *r.Note == *o.Note
}

// Public is r as another client sees it: never invisible, since an
// invisible user is not shown to others at all.
func (r Record) Public() Record {
	if r.Mode == ModeInvisible {
		r.Mode = ""
	}
	return r
}

// Set is a client's change of its own record: Mode if not "", and Note if
// NoteSet (nil clears it). It is applied whole or not at all.
type Set struct {
	Mode    string
	Note    *Note
	NoteSet bool
}

func (Set) Type() string { return "set" }

// Check reports what is wrong with s as a set frame's, the way the server
// refuses it: an error that names the field, its until checked against now.
func (s Set) Check(now time.Time) error {
	if s.Mode == "" && !s.NoteSet {
		return errors.New(`set needs "mode" or "note"`)
	}
	if s.Mode != "" && s.Mode != ModeOnline && s.Mode != ModeDND && s.Mode != ModeInvisible {
		return errors.New(`"mode" must be "online", "dnd" or "invisible"`)
	}
	if s.Note == nil {
		return nil
	}
	if err := checkNote(s.Note); err != nil {
		return err
	}
	return CheckUntil(s.Note.Until, now)
}

// checkNote checks a note's lengths, and that it says something.
func checkNote(n *Note) error {
	switch {
	case utf8.RuneCountInString(n.Text) > MaxNoteText:
		return fmt.Errorf(`"note.text" is too long: at most %d characters`, MaxNoteText)
	case utf8.RuneCountInString(n.Emoji) > MaxNoteEmoji:
		return fmt.Errorf(`"note.emoji" is too long: at most %d characters`, MaxNoteEmoji)
	case n.Text == "" && n.Emoji == "":
		return errors.New(`"note.text" or "note.emoji" must be set; "note": null clears the note`)
	}
	return nil
}

// CheckInfo checks an application's info for a user, such as a token's
// info claim: a JSON object of at most MaxInfo bytes once compact. It
// returns the compact form.
func CheckInfo(info json.RawMessage) (json.RawMessage, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, info); err != nil {
		return nil, fmt.Errorf("info: %w", err)
	}
	if buf.Len() == 0 || buf.Bytes()[0] != '{' {
		return nil, errors.New("info must be a JSON object")
	}
	if buf.Len() > MaxInfo {
		return nil, fmt.Errorf("info is %d bytes, at most %d", buf.Len(), MaxInfo)
	}
	return buf.Bytes(), nil
}

// CheckUntil checks a note's until against now: in the future and at most
// MaxNoteAhead away. 0 (no until) is fine.
func CheckUntil(until int64, now time.Time) error {
	if until == 0 {
		return nil
	}
	if until <= now.UnixMilli() || until > now.Add(MaxNoteAhead).UnixMilli() {
		return errors.New(`"note.until" must be in the future and at most 7 days ahead, in Unix milliseconds`)
	}
	return nil
}

// parseSet reads a set frame: "mode", "note" or both.
func parseSet(data []byte) (Frame, error) {
	var w struct {
		Mode json.RawMessage `json:"mode"`
		Note json.RawMessage `json:"note"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, JSONError(err)
	}
	var f Set
	if len(w.Mode) == 0 && len(w.Note) == 0 {
		return nil, errors.New(`set needs "mode" or "note"`)
	}
	if len(w.Mode) > 0 {
		if err := json.Unmarshal(w.Mode, &f.Mode); err != nil || (f.Mode != ModeOnline && f.Mode != ModeDND && f.Mode != ModeInvisible) {
			return nil, errors.New(`"mode" must be "online", "dnd" or "invisible"`)
		}
	}
	if len(w.Note) > 0 {
		f.NoteSet = true
		if string(w.Note) != "null" {
			n, err := parseNote(w.Note)
			if err != nil {
				return nil, err
			}
			f.Note = n
		}
	}
	return f, nil
}

func parseNote(raw json.RawMessage) (*Note, error) {
	var w struct {
		Text  json.RawMessage `json:"text"`
		Emoji json.RawMessage `json:"emoji"`
		Until json.RawMessage `json:"until"`
	}
	if err := json.Unmarshal(raw, &w); err != nil || raw[0] != '{' {
		return nil, errors.New(`"note" must be an object with "text", "emoji" or "until", or null to clear it`)
	}
	var n Note
	if !absent(w.Text) {
		if err := json.Unmarshal(w.Text, &n.Text); err != nil {
			return nil, errors.New(`"note.text" must be a string`)
		}
	}
	if !absent(w.Emoji) {
		if err := json.Unmarshal(w.Emoji, &n.Emoji); err != nil {
			return nil, errors.New(`"note.emoji" must be a string`)
		}
	}
	if !absent(w.Until) {
		if err := json.Unmarshal(w.Until, &n.Until); err != nil || n.Until <= 0 {
			return nil, errors.New(`"note.until" must be in the future and at most 7 days ahead, in Unix milliseconds`)
		}
	}
	if err := checkNote(&n); err != nil {
		return nil, err
	}
	return &n, nil
}
