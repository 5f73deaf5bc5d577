package protocol

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseClient(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Frame
		err      string // a substring of the error; "" for none
	}{
		{"ping", `{"type":"ping"}`, Ping{}, ""},
		{"ping with extra fields", `{"type":"ping","id":7}`, Ping{}, ""},
		{"silence", `{"type":"silence"}`, Silence{}, ""},
		{"join", `{"type":"join","channel":"lobby"}`, Join{Channel: "lobby"}, ""},
		{"leave", `{"type":"leave","channel":"a:b/c#d"}`, Leave{Channel: "a:b/c#d"}, ""},
		{"chat", `{"type":"chat","channel":"lobby","text":"hi","from":"bob"}`, Chat{Channel: "lobby", Text: "hi"}, ""},
		{"chat with a ref", `{"type":"chat","channel":"lobby","text":"hi","ref":{"id":7}}`, Chat{Channel: "lobby", Text: "hi", Ref: json.RawMessage(`{"id":7}`)}, ""},
		{"chat unicode", `{"type":"chat","channel":"x","text":"h\u00e9 \ud83d\ude00"}`, Chat{Channel: "x", Text: "hé 😀"}, ""},
		{"watch", `{"type":"watch","uids":["bob","carol"]}`, Watch{UIDs: []string{"bob", "carol"}}, ""},
		{"watch nobody", `{"type":"watch","uids":[]}`, Watch{UIDs: []string{}}, ""},
		{"refresh", `{"type":"refresh","token":"t"}`, Refresh{Token: "t"}, ""},
		{"members", `{"type":"members","channel":"lobby","after":"bob","limit":50}`, Members{Channel: "lobby", After: "bob", Limit: 50}, ""},
		{"members from the first", `{"type":"members","channel":"lobby","after":""}`, Members{Channel: "lobby", Limit: DefaultPageLimit}, ""},
		{"members defaults", `{"type":"members","channel":"lobby"}`, Members{Channel: "lobby", Limit: DefaultPageLimit}, ""},
		{"members nulls", `{"type":"members","channel":"lobby","after":null,"limit":null}`, Members{Channel: "lobby", Limit: DefaultPageLimit}, ""},
		{"members most", `{"type":"members","channel":"lobby","limit":1000}`, Members{Channel: "lobby", Limit: MaxPageLimit}, ""},
		{"members least", `{"type":"members","channel":"lobby","limit":1}`, Members{Channel: "lobby", Limit: 1}, ""},
		{"an application's type", `{"type":"cursor","channel":5,"text":[1]}`, Custom{Kind: "cursor", Raw: json.RawMessage(`{"type":"cursor","channel":5,"text":[1]}`)}, ""},
		{"away", `{"type":"activity","state":"away"}`, Activity{State: "away"}, ""},
		{"active", `{"type":"activity","state":"active"}`, Activity{State: "active"}, ""},
		{"activity without state", `{"type":"activity"}`, nil, `activity needs "state": "away" or "active"`},
		{"activity of another state", `{"type":"activity","state":"idle"}`, nil, `activity needs "state": "away" or "active"`},
		{"activity state not a string", `{"type":"activity","state":1}`, nil, `invalid frame: "state" must be a string`},
		{"typing", `{"type":"typing","channel":"lobby"}`, Typing{Channel: "lobby"}, ""},
		{"typing without channel", `{"type":"typing"}`, nil, `typing needs a "channel"`},
		{"typing in a bad channel", `{"type":"typing","channel":"a b"}`, nil, ErrInvalidChannel.Error()},

		{"refresh without token", `{"type":"refresh"}`, nil, `refresh needs a "token"`},
		{"missing type", `{}`, nil, `missing "type"`},
		{"null", `null`, nil, `missing "type"`},
		{"not JSON", `hello`, nil, "invalid JSON"},
		{"truncated", `{"type":"chat"`, nil, "invalid JSON"},
		{"array", `[1,2]`, nil, "a frame is a JSON object"},
		{"type is a number", `{"type":1}`, nil, `"type" must be a string`},
		{"text is a number", `{"type":"chat","channel":"x","text":5}`, nil, `"text" must be a string`},
		{"uids not strings", `{"type":"watch","uids":[1]}`, nil, `"uids" must be an array of strings`},
		{"join without channel", `{"type":"join"}`, nil, `join needs a "channel"`},
		{"bad channel", `{"type":"join","channel":"a b"}`, nil, "invalid channel name"},
		{"long channel", `{"type":"join","channel":"` + strings.Repeat("c", 129) + `"}`, nil, "invalid channel name"},
		{"chat without channel", `{"type":"chat","text":"hi"}`, nil, `chat needs a "channel"`},
		{"empty chat", `{"type":"chat","channel":"x","text":""}`, nil, `chat needs a non-empty "text"`},
		{"watch without uids", `{"type":"watch"}`, nil, `watch needs "uids"`},
		{"watch bad uid", `{"type":"watch","uids":["a b"]}`, nil, `invalid user ID "a b"`},
		{"members without channel", `{"type":"members","limit":10}`, nil, `members needs a "channel"`},
		{"members bad channel", `{"type":"members","channel":"a b"}`, nil, "invalid channel name"},
		{"members channel not a string", `{"type":"members","channel":7}`, nil, `"channel" must be a string`},
		{"members limit 0", `{"type":"members","channel":"lobby","limit":0}`, nil, `"limit" must be a whole number from 1 to 1000`},
		{"members limit negative", `{"type":"members","channel":"lobby","limit":-5}`, nil, `"limit" must be a whole number from 1 to 1000`},
		{"members limit too big", `{"type":"members","channel":"lobby","limit":1001}`, nil, `"limit" must be a whole number from 1 to 1000`},
		{"members limit huge", `{"type":"members","channel":"lobby","limit":1e30}`, nil, `"limit" must be a whole number from 1 to 1000`},
		{"members limit fraction", `{"type":"members","channel":"lobby","limit":2.5}`, nil, `"limit" must be a whole number from 1 to 1000`},
		{"members limit a string", `{"type":"members","channel":"lobby","limit":"10"}`, nil, `"limit" must be a whole number from 1 to 1000`},
		{"members bad after", `{"type":"members","channel":"lobby","after":"a b"}`, nil, `invalid user ID "a b" in "after"`},
		{"members long after", `{"type":"members","channel":"lobby","after":"` + strings.Repeat("u", 65) + `"}`, nil, `in "after"`},
		{"members after a number", `{"type":"members","channel":"lobby","after":5}`, nil, `"after" must be a string`},
		{"watch too many", `{"type":"watch","uids":[` + strings.Repeat(`"u",`, MaxWatch) + `"u"]}`, nil, "watch list too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseClient([]byte(tc.in))
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				assert.NotContains(t, err.Error(), "Go ", "no Go type names")
				assert.NotContains(t, err.Error(), "clientJSON")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// Every frame the server sends encodes with "type" first and its fields in
// the protocol's order, and ParseServer reads it back as it was.
func TestEncodeAndParseServer(t *testing.T) {
	for _, tc := range []struct {
		f    Frame
		want string
	}{
		{Welcome{UID: "alice", TimeoutMS: 30000}, `{"type":"welcome","uid":"alice","timeout_ms":30000}`},
		{Pong{}, `{"type":"pong"}`},
		{Error{Error: "no"}, `{"type":"error","error":"no"}`},
		{Error{Error: "no", Channel: "lobby"}, `{"type":"error","error":"no","channel":"lobby"}`},
		{Error{Error: "no", Channel: "lobby", Ref: json.RawMessage(`"c-1"`)}, `{"type":"error","error":"no","channel":"lobby","ref":"c-1"}`},
		{Chat{Channel: "lobby", From: "alice", Text: "hi", Ref: json.RawMessage(`7`)}, `{"type":"chat","channel":"lobby","from":"alice","text":"hi"}`},
		{Joined{Channel: "lobby", Count: 0}, `{"type":"joined","channel":"lobby","count":0,"members":[]}`},
		{Joined{Channel: "lobby", Count: 3, Members: []string{"a", "b"}}, `{"type":"joined","channel":"lobby","count":3,"members":["a","b"]}`},
		{Left{Channel: "lobby"}, `{"type":"left","channel":"lobby"}`},
		{MembersPage{Channel: "lobby", Count: 3, Members: []string{"a", "b"}, Next: "b"}, `{"type":"members","channel":"lobby","count":3,"members":["a","b"],"next":"b"}`},
		{MembersPage{Channel: "lobby", Count: 3, Members: []string{"c"}}, `{"type":"members","channel":"lobby","count":3,"members":["c"]}`},
		{MembersPage{Channel: "empty"}, `{"type":"members","channel":"empty","count":0,"members":[]}`},
		{Presence{Channel: "lobby", Count: 4, Joins: []string{"dave"}}, `{"type":"presence","channel":"lobby","count":4,"joins":["dave"],"leaves":[]}`},
		{Presence{Channel: "big", Count: 5000, CountOnly: true}, `{"type":"presence","channel":"big","count":5000}`},
		{Watching{}, `{"type":"watching","online":[]}`},
		{Status{Offline: []string{"bob"}}, `{"type":"status","online":[],"offline":["bob"]}`},
		{Status{Offline: []string{"bob"}, LastSeen: map[string]int64{"bob": 1764000000000}}, `{"type":"status","online":[],"offline":["bob"],"last_seen":{"bob":1764000000000}}`},
		{Chat{Channel: "lobby", From: "alice", Text: "hi"}, `{"type":"chat","channel":"lobby","from":"alice","text":"hi"}`},
		{Publish{Channel: "lobby", Data: json.RawMessage(`{"n":1}`)}, `{"type":"publish","channel":"lobby","data":{"n":1}}`},
		{Message{Data: json.RawMessage(`"psst"`)}, `{"type":"message","data":"psst"}`},
	} {
		t.Run(tc.f.Type(), func(t *testing.T) {
			e, err := Encode(tc.f)
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(e.Data))
			assert.Equal(t, tc.f.Type(), e.Type)

			back, err := ParseServer(e.Data)
			require.NoError(t, err)
			again, err := Encode(back)
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(again.Data), "parsed back and encoded again")
		})
	}
}

func TestEncodeRefusesInvalidData(t *testing.T) {
	_, err := Encode(Publish{Channel: "x", Data: json.RawMessage(`{`)})
	assert.Error(t, err)
}

func TestParseServerRefusesUnknownTypes(t *testing.T) {
	_, err := ParseServer([]byte(`{"type":"nope"}`))
	assert.ErrorContains(t, err, `unknown type "nope"`)
	_, err = ParseServer([]byte(`{`))
	assert.Error(t, err)
}

// FuzzParseClient: no input panics the parser; what it accepts is a frame
// with the fields its type needs, and what it refuses gets an error frame
// that is well-formed JSON.
func FuzzParseClient(f *testing.F) {
	for _, s := range []string{
		`{"type":"ping"}`, `{"type":"chat","channel":"a","text":"hi"}`, `{"type":"silence"}`, `{"type":"x"}`,
		`{"type":"join","channel":"lobby"}`, `{"type":"watch","uids":["a"]}`,
		`{"type":"members","channel":"lobby"}`, `{"type":"members","channel":"lobby","after":"bob","limit":1000}`,
		`{"type":"members","channel":"lobby","after":"","limit":0}`, `{"type":"members","channel":"a","limit":1.5e3}`,
		`{"type":"members","channel":"a","after":"\u0000"}`,
		`{`, `null`, `[]`, `"str"`, `{"type":"chat","channel":"a","text":"\ud800"}`, "\xff\xfe", `{"type":"chat","text":null}`,
		`{"type":"set","mode":"dnd"}`, `{"type":"set","note":null}`, `{"type":"set","note":{"text":"x","emoji":"📅","until":1}}`,
		`{"type":"set","mode":"invisible","note":{"emoji":""}}`, `{"type":"set","note":[]}`, `{"type":"set","note":{"until":-1,"text":"a"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := ParseClient(data)
		if err != nil {
			e := MustEncode(Error{Error: err.Error()})
			var m map[string]string
			require.NoError(t, json.Unmarshal(e.Data, &m))
			require.Equal(t, "error", m["type"])
			require.NotEmpty(t, m["error"])
			return
		}
		switch f := in.(type) {
		case Ping, Silence:
		case Refresh:
			require.NotEmpty(t, f.Token)
		case Join:
			require.True(t, ValidChannel(f.Channel))
		case Leave:
			require.True(t, ValidChannel(f.Channel))
		case Chat:
			require.True(t, ValidChannel(f.Channel))
			require.NotEmpty(t, f.Text)
		case Members:
			require.True(t, ValidChannel(f.Channel))
			require.True(t, f.After == "" || ValidUID(f.After))
			require.True(t, 1 <= f.Limit && f.Limit <= MaxPageLimit)
		case Watch:
			require.NotNil(t, f.UIDs)
			require.LessOrEqual(t, len(f.UIDs), MaxWatch)
			for _, uid := range f.UIDs {
				require.True(t, ValidUID(uid))
			}
		case Set:
			require.True(t, f.Mode != "" || f.NoteSet)
			require.Contains(t, []string{"", ModeOnline, ModeDND, ModeInvisible}, f.Mode)
			if f.Note != nil {
				require.True(t, f.Note.Text != "" || f.Note.Emoji != "")
				require.LessOrEqual(t, utf8.RuneCountInString(f.Note.Text), MaxNoteText)
				require.LessOrEqual(t, utf8.RuneCountInString(f.Note.Emoji), MaxNoteEmoji)
				require.GreaterOrEqual(t, f.Note.Until, int64(0))
			}
		case Custom: // the application's, handed over as it came
			require.NotEmpty(t, f.Kind)
			require.Equal(t, data, []byte(f.Raw))
		default:
			t.Fatalf("accepted a frame of type %T", in)
		}
	})
}
