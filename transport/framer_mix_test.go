package transport_test

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Connections pass gorilla's Conn from one to the next (framer.go). Many
// raw clients write their frames in random pieces, interleaved with each
// other, with pings inside fragmented messages, while the Hub's spare
// framers are dropped now and then: each gets exactly the answers to its own
// frames, in order. A framer that kept a piece of one connection's frame, or
// read for the wrong connection, shows as an answer out of place. The seed is
// logged; PRESENCED_FRAMER_SEED replays one.
func TestFramersNeverMixConnections(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("PRESENCED_FRAMER_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "PRESENCED_FRAMER_SEED")
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	s := startServer(t, testConfig())

	const clients, items = 12, 8
	type client struct {
		uid    string
		stream []byte   // what it has still to write
		want   []string // the frames it must get, as "op payload"
	}
	cs := make([]*client, clients)
	for i := range cs {
		c := &client{uid: fmt.Sprint("mix", i)}
		for k := range items {
			ch := fmt.Sprintf("%s-%d", c.uid, k)
			join := fmt.Appendf(nil, `{"type":"join","channel":%q}`, ch)
			joined := fmt.Sprintf(`%d {"type":"joined","channel":%q,"count":1,"members":[%q]}`, opText, ch, c.uid)
			ping := []byte(ch)
			switch rng.IntN(4) {
			case 0:
				c.stream = append(c.stream, clientFrame(fin|opText, join)...)
				c.want = append(c.want, joined)
			case 1: // a ping frame, answered in its turn
				c.stream = append(c.stream, clientFrame(fin|opPing, ping)...)
				c.want = append(c.want, fmt.Sprint(opPong, " ", ch))
			case 2: // the quick path's ping
				c.stream = append(c.stream, clientFrame(fin|opText, appPing)...)
				c.want = append(c.want, fmt.Sprint(opText, ` {"type":"pong"}`))
			case 3: // a join in two fragments with a ping between them
				cut := 1 + rng.IntN(len(join)-1)
				c.stream = append(c.stream, clientFrame(opText, join[:cut])...)
				c.stream = append(c.stream, clientFrame(fin|opPing, ping)...)
				c.stream = append(c.stream, clientFrame(fin|opCont, join[cut:])...)
				c.want = append(c.want, fmt.Sprint(opPong, " ", ch), joined)
			}
		}
		cs[i] = c
	}
	socks := make([]net.Conn, clients)
	readers := make([]*bufio.Reader, clients)
	for i, c := range cs {
		socks[i], readers[i] = welcomed(t, s, c.uid)
	}

	var history []string
	for pending := clients; pending > 0; {
		i := rng.IntN(clients)
		c := cs[i]
		if len(c.stream) == 0 {
			continue
		}
		n := 1 + rng.IntN(min(len(c.stream), 40))
		write(t, socks[i], c.stream[:n])
		history = append(history, fmt.Sprintf("%s wrote %d", c.uid, n))
		if c.stream = c.stream[n:]; len(c.stream) == 0 {
			pending--
		}
		if rng.IntN(20) == 0 {
			s.hub.DropSpareFramers()
			history = append(history, "spares dropped")
		}
	}
	for i, c := range cs {
		got := make([]string, 0, len(c.want))
		for range c.want {
			op, payload := serverFrame(t, socks[i], readers[i])
			got = append(got, fmt.Sprint(op, " ", string(payload)))
		}
		if !assert.Equal(t, c.want, got, "%s's answers", c.uid) {
			t.Logf("seed %d; writes: %v", seed, history)
		}
	}
}
