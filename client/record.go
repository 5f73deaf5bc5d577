package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/presenced/presenced/protocol"
)

// Record is what a user is beside online or offline: Info, the JSON object
// the application vouches for (from the user's token); Mode, "" for online,
// protocol.ModeDND or protocol.ModeInvisible; and a Note. It is the type
// of the records the events carry (protocol.Joined.Users,
// protocol.Presence.Updated, ...), so the two mix without conversion.
type Record = protocol.Record

// Note is a user's status note, such as "In a meeting" with "📅": Until,
// if not 0, is when the server clears it, in Unix milliseconds.
type Note = protocol.Note

// ErrInvalidRecord is wrapped by the error of a Set the server would
// refuse; the error names the field, in the server's words.
var ErrInvalidRecord = errors.New("client: invalid record")

// setFrame is a set as the Client sends it: the parts given, "note": null
// to clear the note.
type setFrame struct {
	Type string `json:"type"`
	Mode string `json:"mode,omitempty"`
	Note any    `json:"note,omitempty"` // nil: kept; a *Note, or null
}

// Set changes the user's mode, its note or both, for all its connections
// (the last set wins among them) and for as long as the server keeps them:
// while the user is online and a while after, across reconnects. A part r
// leaves out is kept, as with the protocol's set frame and the JavaScript
// client's set: Mode "" keeps the mode, protocol.ModeOnline, ModeDND or
// ModeInvisible sets it; Note nil keeps the note, a zero Note
// (&client.Note{}) clears it, another sets it. r.Info is not sent, since a
// user's info comes from its token. Other clients hear of the change with
// the next diffs or status frames, and an invisible user is offline to
// them.
//
// A set the server would refuse is refused here, without sending, with an
// error that wraps ErrInvalidRecord and names the field: neither mode nor
// note, an unknown mode, a note with neither text nor emoji, a text over
// protocol.MaxNoteText or an emoji over protocol.MaxNoteEmoji code points,
// an Until not in the future or more than protocol.MaxNoteAhead away (by
// this machine's clock). Otherwise Set returns once the server took the
// change, and Record(own ID) gives it, or with the server's refusal, a
// *ServerError. Like Join it waits while the Client reconnects; if ctx
// ends first, the change may still be made. A set makes the connection
// active, as a chat does.
func (c *Client) Set(ctx context.Context, r Record) error {
	change, err := checkSet(r, time.Now())
	if err != nil {
		return fmt.Errorf("client: set: %w: %w", ErrInvalidRecord, err)
	}
	frame := setFrame{Type: "set", Mode: change.Mode}
	switch {
	case change.Note != nil:
		frame.Note = change.Note
	case change.NoteSet:
		frame.Note = json.RawMessage("null")
	}
	data, err := json.Marshal(frame)
	if err != nil {
		return fmt.Errorf("client: set: %w", err)
	}
	c.mu.Lock()
	c.away = false
	c.mu.Unlock()
	err = c.retry(ctx, func(cn *conn) error {
		// The same change again on a new connection, if the old one was
		// lost before the server answered: it replaces, so it may repeat.
		_, err := cn.callRaw(ctx, data, &request{kind: "set", change: change})
		return err
	})
	if err != nil {
		return fmt.Errorf("client: set: %w", err)
	}
	return nil
}

// Record returns the record of uid, a user the Client sees: itself, a
// member it holds of a joined channel (see ChannelState.Members), or a
// watched user who is online; false for another, whose record it forgot
// when it stopped seeing the user. A note whose Until passed is left out,
// even before the server's word that it cleared it comes.
func (c *Client) Record(uid string) (Record, bool) {
	c.mu.Lock()
	r, ok := c.records[uid]
	c.mu.Unlock()
	if !ok {
		return Record{}, false
	}
	r = Record{Info: bytes.Clone(r.Info), Mode: r.Mode, Note: cloneNote(r.Note)}
	if r.Note != nil && r.Note.Until != 0 && r.Note.Until <= time.Now().UnixMilli() {
		r.Note = nil
	}
	return r, true
}

func cloneNote(n *Note) *Note {
	if n == nil {
		return nil
	}
	c := *n
	return &c
}

// checkSet checks r, a change to set, as the server checks the set frame
// it makes, and returns that frame: a zero Note clears the note.
func checkSet(r Record, now time.Time) (protocol.Set, error) {
	s := protocol.Set{Mode: r.Mode, NoteSet: r.Note != nil}
	if r.Note != nil && *r.Note != (Note{}) {
		s.Note = cloneNote(r.Note)
	}
	return s, s.Check(now)
}

// noteErr checks a note's lengths, which the server keeps to.
func noteErr(n *Note) error {
	switch {
	case utf8.RuneCountInString(n.Text) > protocol.MaxNoteText:
		return fmt.Errorf(`"note.text" is too long: at most %d characters`, protocol.MaxNoteText)
	case utf8.RuneCountInString(n.Emoji) > protocol.MaxNoteEmoji:
		return fmt.Errorf(`"note.emoji" is too long: at most %d characters`, protocol.MaxNoteEmoji)
	case n.Text == "" && n.Emoji == "":
		return errors.New(`"note.text" or "note.emoji" must be set; "note": null clears the note`)
	}
	return nil
}

// normRecord checks a record the server sent and returns it as the Client
// keeps it: mode "online" as "", info null as none, info compact. The
// bounds are the protocol's, so no server makes the Client keep more.
// An until in the past is fine: the two clocks need not agree.
func normRecord(r Record) (Record, error) {
	switch r.Mode {
	case protocol.ModeOnline:
		r.Mode = ""
	case "", protocol.ModeDND, protocol.ModeInvisible:
	default:
		return r, fmt.Errorf("mode %q", protocol.Truncate(r.Mode))
	}
	if string(r.Info) == "null" {
		r.Info = nil
	}
	if r.Info != nil {
		info, err := protocol.CheckInfo(r.Info)
		if err != nil {
			return r, err
		}
		r.Info = info
	}
	if r.Note != nil {
		if err := noteErr(r.Note); err != nil {
			return r, err
		}
		if r.Note.Until < 0 {
			return r, fmt.Errorf("note until %d", r.Note.Until)
		}
	}
	return r, nil
}

// normRecords checks and normalizes, in place, the records of a frame:
// users holds records of those of listed only, unless anyone.
func normRecords(users map[string]Record, listed []string, anyone bool) error {
	if len(users) == 0 {
		return nil
	}
	var in set
	if !anyone {
		in = setOf(listed)
	}
	for uid, r := range users {
		if _, ok := in[uid]; !anyone && !ok {
			return fmt.Errorf("a record of %q, who is not listed", protocol.Truncate(uid))
		}
		n, err := normRecord(r)
		if err != nil {
			return fmt.Errorf("record of %q: %w", protocol.Truncate(uid), err)
		}
		users[uid] = n
	}
	return nil
}

// The Client keeps the record of each user it sees and of none other: its
// own user, the members its channels' states hold, and the watched users
// online. Whatever makes it stop seeing a user (a leave, a new snapshot or
// page without it, an offline, a watch list without it, a channel left)
// names the user to forgetLocked, which drops the record unless the user
// is still seen elsewhere. So the records never outgrow the state, and a
// server cannot make the Client keep records of users it never listed.

// learnLocked sets the records of uids, users the Client now sees, from
// users: a user listed without a record has none.
func (c *Client) learnLocked(uids []string, users map[string]Record) {
	for _, uid := range uids {
		c.records[uid] = users[uid]
	}
}

// updateLocked applies changed records to the users the Client sees.
func (c *Client) updateLocked(updated map[string]Record) {
	for uid, r := range updated {
		if _, seen := c.records[uid]; seen {
			c.records[uid] = r
		}
	}
}

// forgetLocked drops the records of those of uids the Client no longer
// sees. Those in still it sees: a snapshot that replaces a channel's
// members names most of them again, and they need no look through every
// channel.
func (c *Client) forgetLocked(uids iter.Seq[string], still set) {
	for uid := range uids {
		if _, ok := still[uid]; ok {
			continue
		}
		if _, ok := c.records[uid]; ok && !c.seesLocked(uid) {
			delete(c.records, uid)
		}
	}
}

func (c *Client) seesLocked(uid string) bool {
	if uid == c.self {
		return true
	}
	if st := c.users[uid].State; st == Active || st == Away {
		return true
	}
	for _, ch := range c.channels {
		if _, ok := ch.members[uid]; ok {
			return true
		}
	}
	return false
}

// welcomedLocked takes the user's own mode and note from a connection's
// welcome. A welcome that breaks the record's rules is not worth a
// connection: the mode and note are taken as unset.
func (c *Client) welcomedLocked(w *protocol.Welcome) {
	if c.self != w.UID {
		old := c.self
		c.self = w.UID
		c.forgetLocked(slices.Values([]string{old}), nil)
	}
	own := c.records[w.UID]
	r, err := normRecord(Record{Mode: w.Mode, Note: w.Note})
	if err != nil {
		c.log.Warn("client: own record in the welcome ignored", "err", broken("welcome", err))
		r = Record{}
	}
	own.Mode, own.Note = r.Mode, r.Note
	c.records[w.UID] = own
}

// takeSetErrorLocked removes and returns the set whose first ping the
// server answered and whose second it did not: an error frame that names
// no channel and carries no ref, read now, is that set's refusal.
func (cn *conn) takeSetErrorLocked() *request {
	for _, r := range cn.pending {
		if r.kind == "set" && r.ping != 0 && cn.pongs >= r.ping {
			cn.dropLocked(r)
			return r
		}
	}
	return nil
}

// pongLocked counts a pong and completes the sets whose second ping it
// answers: the server took them, and the user's own record is as set.
func (c *Client) pongLocked(cn *conn) {
	cn.pongs++
	for i := 0; i < len(cn.pending); {
		r := cn.pending[i]
		if r.kind != "set" || r.ping == 0 || cn.pongs < r.ping+1 {
			i++
			continue
		}
		cn.pending = append(cn.pending[:i], cn.pending[i+1:]...)
		own := c.records[c.self]
		if m := r.change.Mode; m != "" {
			own.Mode = m
			if m == protocol.ModeOnline {
				own.Mode = ""
			}
		}
		if r.change.NoteSet {
			own.Note = cloneNote(r.change.Note)
		}
		c.records[c.self] = own
		r.res <- result{}
	}
}
