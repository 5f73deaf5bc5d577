package docs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/docs"
	"github.com/presenced/presenced/internal/apicheck"
	"github.com/presenced/presenced/protocol"
	"github.com/presenced/presenced/transport"
)

// protocolMD returns protocol.md up to the section on v1, whose frames are
// gone.
func protocolMD(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("protocol.md")
	require.NoError(t, err)
	md, _, _ := strings.Cut(string(raw), "\n## Migrating from v1")
	return md
}

// section returns the text of md from the heading that starts with title
// to the next heading of the same level or above.
func section(t *testing.T, md, title string) string {
	t.Helper()
	i := strings.Index(md, "\n"+title)
	require.GreaterOrEqual(t, i, 0, "protocol.md has no %q", title)
	level := strings.Count(strings.Fields(title)[0], "#")
	rest := md[i+1:]
	for j := strings.Index(rest, "\n#"); j >= 0; {
		line := rest[j+1:]
		if l := len(line) - len(strings.TrimLeft(line, "#")); l <= level && strings.HasPrefix(line[l:], " ") {
			return rest[:j]
		}
		k := strings.Index(rest[j+1:], "\n#")
		if k < 0 {
			break
		}
		j += 1 + k
	}
	return rest
}

// table returns the rows of the first Markdown table after marker in md,
// each as its cells.
func table(t *testing.T, md, marker string) [][]string {
	t.Helper()
	i := strings.Index(md, marker)
	require.GreaterOrEqual(t, i, 0, "protocol.md has no %q", marker)
	var rows [][]string
	started := false
	for line := range strings.SplitSeq(md[i:], "\n") {
		if !strings.HasPrefix(line, "|") {
			if started {
				break
			}
			continue
		}
		started = true
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if strings.HasPrefix(cells[0], "---") || len(rows) == 0 && !strings.Contains(line, "`") {
			continue // the header and its rule
		}
		rows = append(rows, cells)
	}
	require.NotEmpty(t, rows, "protocol.md: no table after %q", marker)
	return rows
}

var (
	frameType = regexp.MustCompile(`"type":"([a-z_]+)"`)
	code      = regexp.MustCompile("`([^`]+)`")
)

func types(s string) map[string]bool {
	out := map[string]bool{}
	for _, m := range frameType.FindAllStringSubmatch(s, -1) {
		out[m[1]] = true
	}
	return out
}

// schemaTypes returns the frame types a schema file defines, by its oneOf.
func schemaTypes(t *testing.T, name string) map[string]bool {
	t.Helper()
	raw, err := fs(name)
	require.NoError(t, err)
	var s struct {
		Defs map[string]struct {
			Properties struct {
				Type struct {
					Const string `json:"const"`
				} `json:"type"`
			} `json:"properties"`
		} `json:"$defs"`
	}
	require.NoError(t, json.Unmarshal(raw, &s))
	out := map[string]bool{}
	for _, d := range s.Defs {
		if c := d.Properties.Type.Const; c != "" {
			out[c] = true
		}
	}
	return out
}

func fs(name string) ([]byte, error) {
	f, err := docs.FS.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// The frame tables of protocol.md name the frame types the schemas define,
// in each direction, and no other.
func TestProtocolMDNamesTheFramesOfTheSchemas(t *testing.T) {
	md := protocolMD(t)
	ws := section(t, md, "## WebSocket")
	client, server := map[string]bool{}, map[string]bool{}
	for _, row := range table(t, ws, "**Client → server**") {
		maps.Copy(client, types(row[0]))
		maps.Copy(server, types(strings.Join(row[1:], " ")))
	}
	for _, row := range table(t, ws, "**Server → client**") {
		maps.Copy(server, types(row[0]))
	}
	assert.Equal(t, sorted(schemaTypes(t, "schema/client-frames.json")), sorted(client), "client frames: schema/client-frames.json, then protocol.md")
	assert.Equal(t, sorted(schemaTypes(t, "schema/server-frames.json")), sorted(server), "server frames: schema/server-frames.json, then protocol.md")
	all := map[string]bool{}
	maps.Copy(all, client)
	maps.Copy(all, server)
	for typ := range types(md) {
		assert.True(t, all[typ], "protocol.md names a %q frame that no table lists", typ)
	}
}

// Every frame written out in full in protocol.md is valid by the schema of
// its direction: the examples are the description too.
func TestProtocolMDExamplesMatchTheSchemas(t *testing.T) {
	md := protocolMD(t)
	c := newSchemas(t)
	ws := section(t, md, "## WebSocket")
	clientRows := table(t, ws, "**Client → server**")
	clientCells := map[string]bool{}
	for _, row := range clientRows {
		for _, m := range code.FindAllStringSubmatch(row[0], -1) {
			clientCells[m[1]] = true
		}
	}
	serverTypes := schemaTypes(t, "schema/server-frames.json")
	checked := 0
	prose, fenced := fences(md)
	for _, m := range code.FindAllStringSubmatch(prose, -1) {
		frame := m[1]
		if !strings.HasPrefix(frame, `{"type":`) || !json.Valid([]byte(frame)) {
			continue // a fragment, or elided with ...
		}
		schema := c.server
		if typ := frameType.FindStringSubmatch(frame); clientCells[frame] || !serverTypes[typ[1]] {
			schema = c.client
		}
		assert.NoError(t, validate(schema, frame), "protocol.md's %s", frame)
		checked++
	}
	checked += c.checkBlocks(t, "protocol.md", fenced)
	assert.Greater(t, checked, 30, "examples checked")
}

// The exchanges of chat.md's examples are valid too.
func TestChatMDExamplesMatchTheSchemas(t *testing.T) {
	raw, err := os.ReadFile("chat.md")
	require.NoError(t, err)
	_, fenced := fences(string(raw))
	assert.Greater(t, newSchemas(t).checkBlocks(t, "chat.md", fenced), 10, "examples checked")
}

// checkBlocks validates the frames of the lines of fenced blocks: → is
// what a client sends, ← what the server does, a comment may follow after
// two spaces. It returns how many it checked.
func (c schemas) checkBlocks(t *testing.T, name, fenced string) int {
	t.Helper()
	checked := 0
	for _, line := range strings.Split(fenced, "\n") {
		schema := c.client
		frame, ok := strings.CutPrefix(line, "→ ")
		if !ok {
			schema = c.server
			frame, ok = strings.CutPrefix(line, "← ")
		}
		if frame, _, _ = strings.Cut(frame, "  "); !ok || !json.Valid([]byte(frame)) {
			continue
		}
		assert.NoError(t, validate(schema, frame), "%s's %s", name, line)
		checked++
	}
	return checked
}

// fences splits md into its prose and the text of its fenced blocks.
func fences(md string) (prose, fenced string) {
	var p, f strings.Builder
	in := false
	for line := range strings.SplitSeq(md, "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
			in = !in
		case in:
			f.WriteString(line + "\n")
		default:
			p.WriteString(line + "\n")
		}
	}
	return p.String(), f.String()
}

// The HTTP API of protocol.md is the OpenAPI document's: the same
// requests, and every status the document lists is named in the prose.
func TestProtocolMDNamesThePathsOfOpenAPI(t *testing.T) {
	md := protocolMD(t)
	api := section(t, md, "## HTTP API")
	inMD := map[string]bool{"GET /ws": strings.Contains(md, "## WebSocket: `GET /ws`")}
	request := regexp.MustCompile(`^(GET|POST|PUT|DELETE|PATCH) (/[^?\[ ]*)`)
	for _, row := range table(t, api, "| request |") {
		m := code.FindStringSubmatch(row[0])
		require.NotNil(t, m, "row %q", row[0])
		r := request.FindStringSubmatch(m[1])
		require.NotNil(t, r, "row %q", row[0])
		path := r[2]
		if strings.HasPrefix(path, "/schema/") {
			path = "/schema/{name}" // e.g. /schema/{name}.json
		}
		inMD[r[1]+" "+path] = true
	}
	if strings.Contains(md, "`/presenced.js`") {
		inMD["GET /presenced.js"] = true
	}
	checker, err := apicheck.New()
	require.NoError(t, err)
	inDoc := map[string]bool{}
	statuses := map[string]bool{}
	for path, item := range checker.Doc().Paths.Map() {
		for method, op := range item.Operations() {
			if method == http.MethodOptions {
				continue // CORS preflights: their own section
			}
			inDoc[method+" "+path] = true
			for status := range op.Responses.Map() {
				statuses[status] = true
			}
		}
	}
	// Served by package docs, mounted by cmd/presenced.
	for path, r := range map[string]string{"/openapi.yaml": "GET /openapi.yaml", "/schema/": "GET /schema/{name}"} {
		if strings.Contains(md, "`GET "+path) {
			inMD[r] = true
		}
	}
	assert.Equal(t, sorted(inDoc), sorted(inMD), "requests: docs/openapi.yaml, then protocol.md")
	for status := range statuses {
		if status == "101" || status == "200" || status == "204" {
			continue
		}
		assert.Contains(t, api, status, "docs/openapi.yaml answers %s; protocol.md's HTTP API does not say when", status)
	}
	assert.Contains(t, md, "OPTIONS", "protocol.md describes the preflights of docs/openapi.yaml")
}

// The server serves the descriptions; every exchange here is checked
// against the description itself.
func TestHandlerServesTheDescriptions(t *testing.T) {
	srv := httptest.NewServer(apicheck.Handler(t, docs.Handler()))
	defer srv.Close()
	get := func(method, path string) (*http.Response, []byte) {
		req, err := http.NewRequest(method, srv.URL+path, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, body
	}
	resp, body := get("GET", "/openapi.yaml")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/yaml", resp.Header.Get("Content-Type"))
	assert.True(t, bytes.HasPrefix(body, []byte("openapi: 3.1")), "%.40s", body)
	for _, name := range []string{"client-frames.json", "server-frames.json"} {
		resp, body = get("GET", "/schema/"+name)
		assert.Equal(t, http.StatusOK, resp.StatusCode, name)
		assert.Equal(t, "application/schema+json", resp.Header.Get("Content-Type"))
		var s struct {
			ID string `json:"$id"`
		}
		require.NoError(t, json.Unmarshal(body, &s), name)
		assert.Equal(t, apicheck.SchemaURL(name), s.ID)
	}
	for _, path := range []string{"/schema/nope.json", "/schema/../openapi.yaml", "/docs.go"} {
		resp, body = get("GET", path)
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, path)
		assert.JSONEq(t, `{"error":"not found"}`, string(body), path)
	}
	resp, _ = get("POST", "/openapi.yaml")
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, "GET, HEAD", resp.Header.Get("Allow"))
}

type schemas struct{ client, server *jsonschema.Schema }

func newSchemas(t *testing.T) schemas {
	t.Helper()
	comp := jsonschema.NewCompiler()
	for _, name := range []string{"client-frames.json", "server-frames.json"} {
		raw, err := fs("schema/" + name)
		require.NoError(t, err)
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		require.NoError(t, err)
		require.NoError(t, comp.AddResource(apicheck.SchemaURL(name), v))
	}
	client, err := comp.Compile(apicheck.SchemaURL("client-frames.json"))
	require.NoError(t, err)
	server, err := comp.Compile(apicheck.SchemaURL("server-frames.json"))
	require.NoError(t, err)
	return schemas{client, server}
}

func validate(s *jsonschema.Schema, frame string) error {
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(frame))
	if err != nil {
		return err
	}
	return s.Validate(v)
}

func sorted(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }

// A set frame passes the schema exactly when the server's parser takes it:
// the schema says what the parser checks, field by field.
func TestSetFramesOfTheSchemaAreTheParsers(t *testing.T) {
	c, err := apicheck.New()
	require.NoError(t, err)
	long := strings.Repeat("é", 128)
	for _, f := range []string{
		`{"type":"set","mode":"dnd"}`,
		`{"type":"set","mode":"online"}`,
		`{"type":"set","mode":"invisible","note":null}`,
		`{"type":"set","note":{"text":"In a meeting","emoji":"📅","until":1764003600000}}`,
		`{"type":"set","note":{"emoji":"🌴"}}`,
		`{"type":"set","note":{"text":"` + long + `","emoji":null,"until":null}}`,
		`{"type":"set","note":{"text":"","emoji":"` + strings.Repeat("🙂", 16) + `"}}`,
		`{"type":"set","mode":"dnd","channel":5,"x":1}`,
	} {
		c.Frame(true, []byte(f))
	}
	assert.Empty(t, c.Failures())
	assert.Equal(t, int64(8), c.Counts().FramesIn, "taken by both")
	for _, f := range []string{
		`{"type":"set"}`,
		`{"type":"set","mode":null}`,
		`{"type":"set","mode":"away"}`,
		`{"type":"set","mode":1}`,
		`{"type":"set","note":"busy"}`,
		`{"type":"set","note":[]}`,
		`{"type":"set","note":{}}`,
		`{"type":"set","note":{"text":"","emoji":""}}`,
		`{"type":"set","note":{"text":null,"until":1764003600000}}`,
		`{"type":"set","note":{"text":"` + long + `x"}}`,
		`{"type":"set","note":{"emoji":"` + strings.Repeat("🙂", 17) + `"}}`,
		`{"type":"set","note":{"text":5}}`,
		`{"type":"set","note":{"text":"a","until":0}}`,
		`{"type":"set","note":{"text":"a","until":-1}}`,
		`{"type":"set","note":{"text":"a","until":1.5}}`,
		`{"type":"set","note":{"text":"a","until":"soon"}}`,
		`{"type":"set","mode":"dnd","note":{}}`,
	} {
		c.Frame(true, []byte(f))
	}
	assert.Empty(t, c.Failures())
	assert.Equal(t, int64(17), c.Counts().Malformed, "refused by both")
}

// The frames that carry records, as the protocol package writes them, pass
// the schema of server frames; a record where it has no place fails.
func TestRecordsOfTheProtocolPackageMatchTheSchema(t *testing.T) {
	c, err := apicheck.New()
	require.NoError(t, err)
	dnd := protocol.Record{Info: json.RawMessage(`{"name":"Bob","avatar":"https://example.com/b.png"}`), Mode: protocol.ModeDND,
		Note: &protocol.Note{Text: "In a meeting", Emoji: "📅", Until: 1764003600000}}
	noted := protocol.Record{Note: &protocol.Note{Emoji: "🌴"}}
	for _, f := range []protocol.Frame{
		protocol.Welcome{UID: "alice", TimeoutMS: 30000, Protocol: protocol.Version, Mode: protocol.ModeInvisible, Note: noted.Note},
		protocol.Joined{Channel: "lobby", Count: 2, Members: []string{"alice", "bob"}, Users: map[string]protocol.Record{"bob": dnd}, Mode: protocol.ModeInvisible},
		protocol.MembersPage{Channel: "lobby", Count: 2, Members: []string{"bob"}, Users: map[string]protocol.Record{"bob": dnd}},
		protocol.Presence{Channel: "lobby", Count: 2, Joins: []string{"bob"}, Users: map[string]protocol.Record{"bob": dnd},
			Updated: map[string]protocol.Record{"carol": {}, "dave": noted, "alice": {Mode: protocol.ModeInvisible}}},
		protocol.Presence{Channel: "lobby", Count: 2000, CountOnly: true, Users: map[string]protocol.Record{"bob": dnd}},
		protocol.Watching{Online: []string{"bob"}, Users: map[string]protocol.Record{"bob": dnd}, LastSeen: map[string]int64{"carol": 1764000000000}},
		protocol.Status{Online: []string{"bob"}, Users: map[string]protocol.Record{"bob": dnd}, Updated: map[string]protocol.Record{"dave": {}}},
	} {
		c.Frame(false, protocol.MustEncode(f).Data)
	}
	assert.Empty(t, c.Failures())
	for _, f := range []string{
		`{"type":"joined","channel":"lobby","count":1,"members":["bob"],"users":{"bob":{}}}`,                // an empty record is left out
		`{"type":"joined","channel":"lobby","count":1,"members":["bob"],"users":{"bob":{"mode":"online"}}}`, // online is no mode
		`{"type":"joined","channel":"lobby","count":1,"members":["bob"],"mode":"dnd"}`,                      // only invisible is said
		`{"type":"presence","channel":"lobby","count":3,"updated":{"bob":{}}}`,                              // never in count-only diffs
		`{"type":"status","online":[],"offline":[],"updated":{"bob":{"note":{"until":1764003600000}}}}`,     // a note says something
		`{"type":"status","online":[],"offline":[],"updated":{"bob":{"info":"Bob"}}}`,                       // info is an object
		`{"type":"watching","online":[],"last_seen":{}}`,
		`{"type":"welcome","uid":"alice","timeout_ms":30000,"protocol":"2.2","note":null}`,
	} {
		c.Frame(false, []byte(f))
	}
	assert.Len(t, c.Failures(), 8)
}

// The HTTP API's records are the frames': the same parts, the same rules.
func TestOpenAPIRecords(t *testing.T) {
	checker, err := apicheck.New()
	require.NoError(t, err)
	schemas := checker.Doc().Components.Schemas
	check := func(schema, body string) error {
		var v any
		require.NoError(t, json.Unmarshal([]byte(body), &v), body)
		return schemas[schema].Value.VisitJSON(v)
	}
	for schema, body := range map[string]string{
		"User":        `{"uid":"bob","online":true,"connections":1,"state":"active","info":{"name":"Bob"},"mode":"dnd","note":{"text":"In a meeting","emoji":"📅","until":1764003600000}}`,
		"ChannelPage": `{"channel":"lobby","count":2,"members":["alice","bob"],"users":{"bob":{"info":{"name":"Bob"},"mode":"invisible"}}}`,
	} {
		assert.NoError(t, check(schema, body), body)
	}
	for body, schema := range map[string]string{
		`{"uid":"bob","online":true,"connections":1,"state":"active","mode":"online"}`:                                    "User",
		`{"uid":"bob","online":true,"connections":1,"state":"active","note":{"until":1764003600000}}`:                     "User",
		`{"uid":"bob","online":true,"connections":1,"state":"active","note":{"text":"` + strings.Repeat("é", 129) + `"}}`: "User",
		`{"channel":"lobby","count":1,"members":["bob"],"users":{"bob":{}}}`:                                              "ChannelPage",
		`{"channel":"lobby","count":1,"members":["bob"],"users":{"bob":{"mode":"dnd","x":1}}}`:                            "ChannelPage",
		`{"channel":"lobby","count":1,"members":["bob"],"users":{}}`:                                                      "ChannelPage",
	} {
		assert.Error(t, check(schema, body), body)
	}
}

// The errors protocol.md lists for a bad set are the server's, word for
// word, and it lists each of them.
func TestProtocolMDNamesTheErrorsOfSet(t *testing.T) {
	rows := table(t, section(t, protocolMD(t), "### Records, modes and notes"), "| error |")
	var listed []string
	for _, row := range rows {
		for _, m := range code.FindAllStringSubmatch(row[0], -1) {
			listed = append(listed, m[1])
		}
	}
	said := map[string]bool{protocol.CheckUntil(1, time.Now()).Error(): true}
	for _, f := range []string{
		`{"type":"set"}`,
		`{"type":"set","mode":"away"}`,
		`{"type":"set","note":"busy"}`,
		`{"type":"set","note":{"text":5}}`,
		`{"type":"set","note":{"emoji":5}}`,
		`{"type":"set","note":{"text":"` + strings.Repeat("x", protocol.MaxNoteText+1) + `"}}`,
		`{"type":"set","note":{"emoji":"` + strings.Repeat("x", protocol.MaxNoteEmoji+1) + `"}}`,
		`{"type":"set","note":{}}`,
		`{"type":"set","note":{"text":"a","until":-1}}`,
	} {
		_, err := protocol.ParseClient([]byte(f))
		require.Error(t, err, f)
		said[err.Error()] = true
	}
	assert.Equal(t, sorted(said), slices.Sorted(slices.Values(listed)))
}

// The records parameter takes what the server takes: the description and a
// real Hub agree on every value, as apicheck checks each exchange.
func TestRecordsParameterIsTheServers(t *testing.T) {
	hub, err := transport.New(transport.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = hub.Shutdown(context.Background()) })
	srv := httptest.NewServer(apicheck.Handler(t, hub))
	t.Cleanup(srv.Close)
	for value, status := range map[string]int{"1": 200, "0": 200, "": 200, "2": 400, "true": 400, "yes": 400} {
		resp, err := http.Get(srv.URL + "/api/channels/lobby?records=" + value)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, status, resp.StatusCode, "records=%s", value)
	}
}
