package transport_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	sseSeed  = flag.Uint64("sse.seed", 0, "TestSSEAndWebSocketAgree: run this seed only (0: -sse.seeds seeds from 1)")
	sseSeeds = flag.Int("sse.seeds", 3, "TestSSEAndWebSocketAgree: how many seeds")
	sseSteps = flag.Int("sse.steps", 40, "TestSSEAndWebSocketAgree: actions per seed")
)

// One user watching over a stream and over a WebSocket at once hears the
// same frames, in the same order, whatever the others do: random joins,
// leaves, chats, typing, modes, activity, connections coming and going and
// ticks between them. A failure names its seed and the actions it took;
// -sse.seed=N runs that one again.
func TestSSEAndWebSocketAgree(t *testing.T) {
	seeds := []uint64{*sseSeed}
	if *sseSeed == 0 {
		seeds = seeds[:0]
		for i := range *sseSeeds {
			seeds = append(seeds, uint64(i+1))
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			history := agreeRun(t, seed, *sseSteps)
			if t.Failed() {
				t.Logf("seed %d, rerun with -sse.seed=%d; its actions:\n%s", seed, seed, strings.Join(history, "\n"))
			}
		})
	}
}

// agreeRun plays steps random actions and compares the watcher's two
// connections; it returns the actions taken.
func agreeRun(t *testing.T, seed uint64, steps int) []string {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	s := startServer(t, testConfig())
	channels := []string{"lobby", "room"}
	users := []string{"ann", "ben", "cat", "dan"}
	stream := openSSE(t, s.httpURL(), "uid=obs&channels=lobby,room", nil)
	ws, _ := s.dialIn(t, "obs", "lobby", "room")
	l := listen(ws)
	watch := `{"type":"watch","uids":["ann","ben","cat","dan"]}`
	send(t, ws, watch)
	status, body := stream.post(t, watch)
	require.Equal(t, http.StatusNoContent, status, body)
	// What each connection had before the other existed differs (its own
	// snapshots): compare from a point both reached.
	send(t, ws, `{"type":"ping"}`)
	l.until(t, `{"type":"pong"}`)
	stream.sync(t)

	conns := map[string]*peer{}
	var history []string
	act := func(uid, frame string) {
		history = append(history, uid+": "+frame)
		if c := conns[uid]; c != nil {
			_ = c.ws.WriteMessage(websocket.TextMessage, []byte(frame))
		}
	}
	for range steps {
		uid := users[rng.IntN(len(users))]
		ch := channels[rng.IntN(len(channels))]
		switch rng.IntN(9) {
		case 0, 1:
			if conns[uid] == nil {
				joined := channels[:rng.IntN(len(channels)+1)]
				history = append(history, fmt.Sprintf("%s connects in %v", uid, joined))
				var c *websocket.Conn
				if len(joined) == 0 {
					c, _ = s.dial(t, uid)
				} else {
					c, _ = s.dialIn(t, uid, joined...)
				}
				conns[uid] = newPeer(c)
			} else {
				history = append(history, uid+" closes")
				_ = conns[uid].ws.Close()
				delete(conns, uid)
			}
		case 2:
			act(uid, `{"type":"join","channel":"`+ch+`"}`)
		case 3:
			act(uid, `{"type":"leave","channel":"`+ch+`"}`)
		case 4:
			act(uid, `{"type":"chat","channel":"`+ch+`","text":"hi"}`)
		case 5:
			act(uid, `{"type":"typing","channel":"`+ch+`"}`)
		case 6:
			act(uid, `{"type":"set","mode":"`+[]string{"online", "invisible", "dnd"}[rng.IntN(3)]+`"}`)
		case 7:
			act(uid, `{"type":"activity","state":"`+[]string{"away", "active"}[rng.IntN(2)]+`"}`)
		case 8:
			history = append(history, "tick")
			s.step(1)
		}
	}
	for uid, c := range conns {
		// Each one's frames are handled before the last ticks: its pong
		// comes after everything it sent.
		require.NoError(t, c.ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping"}`)), uid)
		select {
		case <-c.pong:
		case <-time.After(waitLong):
			t.Fatalf("%s: no pong", uid)
		}
	}
	s.step(2)
	send(t, ws, `{"type":"ping"}`)
	status, body = stream.post(t, `{"type":"ping"}`)
	require.Equal(t, http.StatusNoContent, status, body)
	var overWS, overSSE []string
	for f := ""; f != `{"type":"pong"}`; {
		f = l.next(t)
		overWS = append(overWS, f)
	}
	for f := ""; f != `{"type":"pong"}`; {
		f = stream.next(t)
		overSSE = append(overSSE, f)
	}
	assert.Equal(t, overWS, overSSE, "seed %d", seed)
	t.Logf("seed %d: %d frames compared", seed, len(overWS))
	return history
}

// peer is another user's WebSocket, read to the end; pong hears its pongs.
type peer struct {
	ws   *websocket.Conn
	pong chan struct{}
}

func newPeer(ws *websocket.Conn) *peer {
	p := &peer{ws: ws, pong: make(chan struct{}, 64)}
	_ = ws.SetReadDeadline(time.Time{})
	go func() {
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			if string(data) == `{"type":"pong"}` {
				select {
				case p.pong <- struct{}{}:
				default:
				}
			}
		}
	}()
	return p
}
