package transport

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHandleFrame(t *testing.T) {
	for _, tc := range []struct {
		name, in       string
		reply, publish string
		silence        bool
	}{
		{"ping", `{"type":"ping"}`, `{"type":"pong"}`, "", false},
		{"ping with extra fields", `{"type":"ping","id":7}`, `{"type":"pong"}`, "", false},
		{"chat", `{"type":"chat","text":"hi"}`, "", `{"type":"chat","from":"alice","text":"hi"}`, false},
		{"chat cannot forge from", `{"type":"chat","text":"hi","from":"bob"}`, "", `{"type":"chat","from":"alice","text":"hi"}`, false},
		{"chat unicode", `{"type":"chat","text":"h\u00e9 \ud83d\ude00"}`, "", `{"type":"chat","from":"alice","text":"hé 😀"}`, false},
		{"silence", `{"type":"silence"}`, "", "", true},
		{"unknown", `{"type":"x"}`, `{"type":"error","error":"unknown type \"x\""}`, "", false},
		{"long unknown type is cut", `{"type":"` + string(make([]byte, 0)) + `aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}`,
			`{"type":"error","error":"unknown type \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...\""}`, "", false},
		{"missing type", `{}`, `{"type":"error","error":"missing \"type\""}`, "", false},
		{"null", `null`, `{"type":"error","error":"missing \"type\""}`, "", false},
		{"empty chat", `{"type":"chat","text":""}`, `{"type":"error","error":"chat needs a non-empty \"text\""}`, "", false},
		{"type is a number", `{"type":1}`, "", "", false}, // error, checked below
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := handleFrame("alice", []byte(tc.in))
			assert.Equal(t, tc.silence, a.silence)
			if tc.name == "type is a number" {
				assert.Contains(t, string(a.reply), `"type":"error"`)
				assert.Contains(t, string(a.reply), "invalid JSON")
				return
			}
			assert.Equal(t, tc.reply, string(a.reply))
			assert.Equal(t, tc.publish, string(a.publish))
		})
	}
}

// FuzzHandleFrame: no input panics the handler, and whatever it answers is
// one well-formed frame of the protocol.
func FuzzHandleFrame(f *testing.F) {
	for _, s := range []string{
		`{"type":"ping"}`, `{"type":"chat","text":"hi"}`, `{"type":"silence"}`, `{"type":"x"}`,
		`{`, `null`, `[]`, `"str"`, `{"type":"chat","text":"\ud800"}`, "\xff\xfe", `{"type":"chat","text":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a := handleFrame("u-1", data)
		n := 0
		if a.reply != nil {
			n++
			var m map[string]any
			require.NoError(t, json.Unmarshal(a.reply, &m), "reply %s", a.reply)
			switch m["type"] {
			case "pong":
				require.Len(t, m, 1)
			case "error":
				require.IsType(t, "", m["error"])
			default:
				t.Fatalf("reply of type %v", m["type"])
			}
		}
		if a.publish != nil {
			n++
			var m map[string]string
			require.NoError(t, json.Unmarshal(a.publish, &m), "publish %s", a.publish)
			require.Equal(t, "chat", m["type"])
			require.Equal(t, "u-1", m["from"])
			require.NotEmpty(t, m["text"])
			var in struct{ Text string }
			require.NoError(t, json.Unmarshal(data, &in))
			require.Equal(t, in.Text, m["text"])
		}
		if a.silence {
			n++
		}
		require.Equal(t, 1, n, "exactly one outcome per frame")
	})
}
