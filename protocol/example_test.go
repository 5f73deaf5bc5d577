package protocol_test

import (
	"fmt"

	"github.com/presenced/presenced/protocol"
)

// A frame is encoded once, whatever the number of connections it goes to.
func ExampleEncode() {
	f, err := protocol.Encode(protocol.Presence{Channel: "lobby", Count: 4, Joins: []string{"dave"}, Leaves: []string{"bob"}})
	if err != nil {
		panic(err)
	}
	fmt.Println(f.Type)
	fmt.Println(string(f.Data))
	// Output:
	// presence
	// {"type":"presence","channel":"lobby","count":4,"joins":["dave"],"leaves":["bob"]}
}

// A server reads what a client sent; a bad frame gets an error meant for the
// client's developer, to send back in an error frame.
func ExampleParseClient() {
	for _, in := range []string{
		`{"type":"join","channel":"lobby"}`,
		`{"type":"chat","channel":"lobby"}`,
		`{"type":"reaction","emoji":"+1"}`,
	} {
		f, err := protocol.ParseClient([]byte(in))
		if err != nil {
			fmt.Println(string(protocol.MustEncode(protocol.Error{Error: err.Error()}).Data))
			continue
		}
		switch f := f.(type) {
		case protocol.Join:
			fmt.Println("join", f.Channel)
		case protocol.Custom:
			fmt.Println("the application's own:", f.Kind)
		}
	}
	// Output:
	// join lobby
	// {"type":"error","error":"chat needs a non-empty \"text\""}
	// the application's own: reaction
}

// A client reads what the server sent as typed frames.
func ExampleParseServer() {
	f, err := protocol.ParseServer([]byte(`{"type":"joined","channel":"lobby","count":3,"members":["alice","bob","carol"]}`))
	if err != nil {
		panic(err)
	}
	if j, ok := f.(*protocol.Joined); ok {
		fmt.Println(j.Channel, j.Count, j.Members)
	}
	// Output:
	// lobby 3 [alice bob carol]
}
