package apicheck

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"unicode/utf8"

	"github.com/presenced/presenced/protocol"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// seenLimit bounds the cache of checked frames, by hash: a frame fanned
// out to many connections is checked once, and the cache stays small
// enough not to count in the tests that measure the heap.
const seenLimit = 1024

var seed = maphash.MakeSeed()

// Frame checks one frame: written by the server (in false) against
// server-frames.json, or read from a client (in true) against
// client-frames.json. A client frame must be valid exactly when the
// server's parser accepts it: robustness tests send frames both refuse,
// which count as malformed, while a frame the server takes and the schema
// refuses (or the reverse) is a failure. It has the signature of
// wiretap.Frame.
func (c *Checker) Frame(in bool, data []byte) {
	switch {
	case in && data == nil:
		c.binaryIns.Add(1)
		return
	case !in:
		c.framesOut.Add(1)
	}
	key := maphash.Bytes(seed, data)
	if in {
		key = ^key
	}
	c.mu.Lock()
	msg, done := c.seen[key]
	c.mu.Unlock()
	if !done {
		msg = c.check(in, data)
		c.mu.Lock()
		if len(c.seen) >= seenLimit {
			clear(c.seen)
		}
		c.seen[key] = msg
		c.mu.Unlock()
	}
	switch {
	case msg == malformed:
		c.malformed.Add(1)
	case msg != "":
		c.fail(msg)
	case in:
		c.framesIn.Add(1)
	}
}

// malformed marks a client frame that the schema and the server both refuse.
const malformed = "\x00malformed"

func (c *Checker) check(in bool, data []byte) string {
	if !in {
		if err := validate(c.server, data); err != nil {
			return fmt.Sprintf("server frame %s: %s", short(data), oneLine(err))
		}
		return ""
	}
	if !utf8.Valid(data) {
		return malformed // the server closes the connection with 1007
	}
	schemaErr := validate(c.client, data)
	_, parseErr := protocol.ParseClient(data)
	switch {
	case schemaErr != nil && parseErr != nil:
		return malformed
	case schemaErr != nil:
		return fmt.Sprintf("client frame %s: the server accepts it, docs/schema/client-frames.json does not: %s", short(data), oneLine(schemaErr))
	case parseErr != nil:
		return fmt.Sprintf("client frame %s: docs/schema/client-frames.json accepts it, the server refuses it: %v", short(data), parseErr)
	}
	return ""
}

func validate(s *jsonschema.Schema, data []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if err := s.Validate(v); err != nil {
		// Keep what failed where, not the schema's URL.
		msg := err.Error()
		if i := strings.Index(msg, "- at "); i >= 0 {
			msg = msg[i:]
		}
		return errors.New(msg)
	}
	return nil
}
