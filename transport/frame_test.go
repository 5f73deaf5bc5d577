package transport

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseFrame(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     inbound
		err      string // a substring of the error; "" for none
	}{
		{"ping", `{"type":"ping"}`, inbound{Type: "ping"}, ""},
		{"ping with extra fields", `{"type":"ping","id":7}`, inbound{Type: "ping"}, ""},
		{"silence", `{"type":"silence"}`, inbound{Type: "silence"}, ""},
		{"join", `{"type":"join","channel":"lobby"}`, inbound{Type: "join", Channel: "lobby"}, ""},
		{"leave", `{"type":"leave","channel":"a:b/c#d"}`, inbound{Type: "leave", Channel: "a:b/c#d"}, ""},
		{"chat", `{"type":"chat","channel":"lobby","text":"hi","from":"bob"}`, inbound{Type: "chat", Channel: "lobby", Text: "hi"}, ""},
		{"chat unicode", `{"type":"chat","channel":"x","text":"h\u00e9 \ud83d\ude00"}`, inbound{Type: "chat", Channel: "x", Text: "hé 😀"}, ""},
		{"watch", `{"type":"watch","uids":["bob","carol"]}`, inbound{Type: "watch", UIDs: []string{"bob", "carol"}}, ""},
		{"watch nobody", `{"type":"watch","uids":[]}`, inbound{Type: "watch", UIDs: []string{}}, ""},

		{"unknown", `{"type":"x"}`, inbound{}, `unknown type "x"`},
		{"long unknown type is cut", `{"type":"` + strings.Repeat("a", 40) + `"}`, inbound{}, `unknown type "` + strings.Repeat("a", 32) + `..."`},
		{"missing type", `{}`, inbound{}, `missing "type"`},
		{"null", `null`, inbound{}, `missing "type"`},
		{"not JSON", `hello`, inbound{}, "invalid JSON"},
		{"truncated", `{"type":"chat"`, inbound{}, "invalid JSON"},
		{"array", `[1,2]`, inbound{}, "a frame is a JSON object"},
		{"type is a number", `{"type":1}`, inbound{}, `"type" must be a string`},
		{"text is a number", `{"type":"chat","channel":"x","text":5}`, inbound{}, `"text" must be a string`},
		{"uids not strings", `{"type":"watch","uids":[1]}`, inbound{}, `"uids" must be an array of strings`},
		{"join without channel", `{"type":"join"}`, inbound{}, `join needs a "channel"`},
		{"bad channel", `{"type":"join","channel":"a b"}`, inbound{}, "invalid channel name"},
		{"long channel", `{"type":"join","channel":"` + strings.Repeat("c", 129) + `"}`, inbound{}, "invalid channel name"},
		{"chat without channel", `{"type":"chat","text":"hi"}`, inbound{}, `chat needs a "channel"`},
		{"empty chat", `{"type":"chat","channel":"x","text":""}`, inbound{}, `chat needs a non-empty "text"`},
		{"watch without uids", `{"type":"watch"}`, inbound{}, `watch needs "uids"`},
		{"watch bad uid", `{"type":"watch","uids":["a b"]}`, inbound{}, `invalid user ID "a b"`},
		{"watch too many", `{"type":"watch","uids":[` + strings.Repeat(`"u",`, MaxWatch) + `"u"]}`, inbound{}, "watch list too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseFrame([]byte(tc.in))
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				assert.NotContains(t, err.Error(), "Go ", "no Go type names")
				assert.NotContains(t, err.Error(), "wireFrame")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// FuzzParseFrame: no input panics the parser; what it accepts is a frame the
// Hub handles, with the fields that type needs, and what it refuses gets an
// error frame that is well-formed JSON.
func FuzzParseFrame(f *testing.F) {
	for _, s := range []string{
		`{"type":"ping"}`, `{"type":"chat","channel":"a","text":"hi"}`, `{"type":"silence"}`, `{"type":"x"}`,
		`{"type":"join","channel":"lobby"}`, `{"type":"watch","uids":["a"]}`,
		`{`, `null`, `[]`, `"str"`, `{"type":"chat","channel":"a","text":"\ud800"}`, "\xff\xfe", `{"type":"chat","text":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := parseFrame(data)
		if err != nil {
			var m map[string]string
			require.NoError(t, json.Unmarshal(errorMsg(err.Error(), in.Channel), &m))
			require.Equal(t, "error", m["type"])
			require.NotEmpty(t, m["error"])
			return
		}
		switch in.Type {
		case "ping", "silence":
		case "join", "leave":
			require.NotEmpty(t, in.Channel)
		case "chat":
			require.NotEmpty(t, in.Channel)
			require.NotEmpty(t, in.Text)
		case "watch":
			require.NotNil(t, in.UIDs)
			require.LessOrEqual(t, len(in.UIDs), MaxWatch)
			for _, uid := range in.UIDs {
				require.True(t, ValidUID(uid))
			}
		default:
			t.Fatalf("accepted type %q", in.Type)
		}
	})
}
