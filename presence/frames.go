package presence

import (
	"encoding/json"
	"fmt"
)

// Frames the Node sends, in the field order of the protocol.
type (
	joinedFrame struct {
		Type    string   `json:"type"`
		Channel string   `json:"channel"`
		Count   int      `json:"count"`
		Members []string `json:"members"`
	}
	leftFrame struct {
		Type    string `json:"type"`
		Channel string `json:"channel"`
	}
	// diffFrame leaves out both lists for a channel above Config.PresenceLists.
	diffFrame struct {
		Type    string    `json:"type"`
		Channel string    `json:"channel"`
		Count   int       `json:"count"`
		Joins   *[]string `json:"joins,omitempty"`
		Leaves  *[]string `json:"leaves,omitempty"`
	}
	watchingFrame struct {
		Type   string   `json:"type"`
		Online []string `json:"online"`
	}
	statusFrame struct {
		Type    string   `json:"type"`
		Online  []string `json:"online"`
		Offline []string `json:"offline"`
	}
	chatFrame struct {
		Type    string `json:"type"`
		Channel string `json:"channel"`
		From    string `json:"from"`
		Text    string `json:"text"`
	}
	publishFrame struct {
		Type    string          `json:"type"`
		Channel string          `json:"channel"`
		Data    json.RawMessage `json:"data"`
	}
	messageFrame struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
)

// mustJSON marshals the frame types above. They hold strings, ints, string
// slices and data already checked to be valid JSON, so it cannot fail.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("presence: marshal %T: %v", v, err))
	}
	return b
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
