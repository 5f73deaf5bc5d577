package transport

import (
	"encoding/json"
	"fmt"
)

// Outbound frames, in the field order of the protocol.
type (
	welcomeFrame struct {
		Type      string   `json:"type"`
		UID       string   `json:"uid"`
		TimeoutMS int64    `json:"timeout_ms"`
		Online    []string `json:"online"`
	}
	chatFrame struct {
		Type string `json:"type"`
		From string `json:"from"`
		Text string `json:"text"`
	}
	presenceFrame struct {
		Type   string `json:"type"`
		UID    string `json:"uid"`
		Online bool   `json:"online"`
	}
	errorFrame struct {
		Type  string `json:"type"`
		Error string `json:"error"`
	}
)

var pongMsg = []byte(`{"type":"pong"}`)

// inboundFrame is every field a client frame may carry; unknown fields are
// ignored so clients can add their own.
type inboundFrame struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
}

// frameAction is what one inbound text frame asks of the Hub.
type frameAction struct {
	reply   []byte // to the sender only
	publish []byte // to every connection of every node
	silence bool   // stop counting control frames as keepalives
}

// handleFrame interprets one inbound text frame from uid. It never fails: bad
// input yields an error reply and the connection stays open.
func handleFrame(uid string, data []byte) frameAction {
	var in inboundFrame
	if err := json.Unmarshal(data, &in); err != nil {
		return frameAction{reply: errorMsg(fmt.Sprintf("invalid JSON: %v", err))}
	}
	switch in.Type {
	case "ping":
		return frameAction{reply: pongMsg}
	case "chat":
		if in.Text == nil || *in.Text == "" {
			return frameAction{reply: errorMsg(`chat needs a non-empty "text"`)}
		}
		return frameAction{publish: mustJSON(chatFrame{Type: "chat", From: uid, Text: *in.Text})}
	case "silence":
		return frameAction{silence: true}
	case "":
		return frameAction{reply: errorMsg(`missing "type"`)}
	default:
		t := in.Type
		if len(t) > 32 {
			t = t[:32] + "..."
		}
		return frameAction{reply: errorMsg(fmt.Sprintf("unknown type %q", t))}
	}
}

func errorMsg(msg string) []byte {
	return mustJSON(errorFrame{Type: "error", Error: msg})
}

func presenceMsg(uid string, online bool) []byte {
	return mustJSON(presenceFrame{Type: "presence", UID: uid, Online: online})
}

// mustJSON marshals the frame types above, which cannot fail: their fields are
// strings, bools, ints and string slices.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("transport: marshal %T: %v", v, err))
	}
	return b
}
