package transport_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/presence"
)

// readModes are the two ways a Hub reads its sockets.
var readModes = []struct {
	name string
	park bool
}{{"polled", false}, {"parked", true}}

// rawJoined upgrades a raw TCP connection for uid in channel and reads the
// welcome and the joined snapshot.
func (s *testServer) rawJoined(t *testing.T, uid, channel string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, br := s.upgradeQuery(t, "uid="+url.QueryEscape(uid)+"&channels="+url.QueryEscape(channel))
	serverFrameOf(t, c, br, opText) // welcome
	serverFrameOf(t, c, br, opText) // joined
	return c, br
}

func textFrame(s string) []byte { return clientFrame(fin|opText, []byte(s)) }

// Frames a client writes in one TCP segment are handled in the order sent,
// whatever their type: a chat is not overtaken by the leave after it, nor
// the custom frame after a chat by the chat, and every answer comes back in
// that order, OnMessage's error frame included.
func TestFramesInOneSegmentAreHandledInOrder(t *testing.T) {
	conns := 1000
	if raceEnabled {
		conns = 200
	}
	for _, mode := range readModes {
		t.Run(mode.name, func(t *testing.T) {
			var mu sync.Mutex
			seen := map[string]int{}
			cfg := testConfig()
			cfg.ParkReaders = mode.park
			cfg.OnMessage = func(_ context.Context, uid, typ string, frame json.RawMessage) error {
				mu.Lock()
				seen[uid]++
				mu.Unlock()
				return errors.New("custom frame seen")
			}
			s := startServer(t, cfg)
			start := time.Now()
			work := make(chan int)
			var wg sync.WaitGroup
			for range 32 {
				wg.Go(func() {
					for i := range work {
						uid, ch := fmt.Sprintf("u-%d", i), fmt.Sprintf("r-%d", i)
						c, br := s.rawJoined(t, uid, ch)
						var seg []byte
						for _, f := range []string{
							`{"type":"chat","channel":"` + ch + `","text":"a"}`,
							`{"type":"leave","channel":"` + ch + `"}`,
							`{"type":"join","channel":"` + ch + `"}`,
							`{"type":"chat","channel":"` + ch + `","text":"b"}`,
							`{"type":"note","n":1}`,
						} {
							seg = append(seg, textFrame(f)...)
						}
						write(t, c, seg)
						for _, want := range []string{
							`{"type":"chat","channel":"` + ch + `","from":"` + uid + `","text":"a"}`,
							`{"type":"left","channel":"` + ch + `"}`,
							`{"type":"joined","channel":"` + ch + `","count":1,"members":["` + uid + `"]}`,
							`{"type":"chat","channel":"` + ch + `","from":"` + uid + `","text":"b"}`,
							`{"type":"error","error":"custom frame seen"}`,
						} {
							if !assert.Equal(t, want, string(serverFrameOf(t, c, br, opText)), uid) {
								break
							}
						}
					}
				})
			}
			for i := range conns {
				work <- i
			}
			close(work)
			wg.Wait()
			t.Logf("%s: %d connections, 5 frames in one segment each, all answered in order in %v", mode.name, conns, time.Since(start))
			assert.Equal(t, float64(2*conns), metric(t, s.reg, "presenced_chat_messages_total", nil))
			assert.Zero(t, metric(t, s.reg, "presenced_frames_refused_total", nil))
			mu.Lock()
			defer mu.Unlock()
			assert.Len(t, seen, conns)
		})
	}
}

// A chat the client sent just before it went reaches the channel: the close
// (a FIN, or a close frame in the same segment) is handled after it.
func TestAChatBeforeTheCloseReachesTheChannel(t *testing.T) {
	var s *testServer
	read := 1.0 // text frames the server read: the observer's watch so far
	closes := []struct {
		name string
		bye  func(t *testing.T, c net.Conn, chat []byte)
	}{
		{"FIN", func(t *testing.T, c net.Conn, chat []byte) {
			write(t, c, chat)
			require.NoError(t, c.(*net.TCPConn).CloseWrite())
		}},
		{"close frame in the same segment", func(t *testing.T, c net.Conn, chat []byte) {
			write(t, c, append(chat, clientFrame(fin|opClose, []byte{0x03, 0xe8})...))
		}},
		{"RST once the chat was read", func(t *testing.T, c net.Conn, chat []byte) {
			write(t, c, chat)
			read++
			s.waitMetric(t, "presenced_keepalives_total", map[string]string{"kind": "text"}, read)
			require.NoError(t, c.(*net.TCPConn).SetLinger(0))
			require.NoError(t, c.Close())
		}},
	}
	for _, mode := range readModes {
		for _, bye := range closes {
			t.Run(mode.name+"/"+bye.name, func(t *testing.T) {
				cfg := testConfig()
				cfg.ParkReaders = mode.park
				s = startServer(t, cfg)
				read = 1
				w := s.observer(t, "lobby", "bob")
				const rounds = 10
				for i := range rounds {
					uid := fmt.Sprintf("alice-%d", i)
					c, _ := s.rawJoined(t, uid, "lobby")
					bye.bye(t, c, textFrame(fmt.Sprintf(`{"type":"chat","channel":"lobby","text":"bye %d"}`, i)))
					w.until(t, fmt.Sprintf(`{"type":"chat","channel":"lobby","from":"%s","text":"bye %d"}`, uid, i))
				}
				t.Logf("%d of %d chats sent just before a %s reached the channel", rounds, rounds, bye.name)
				assert.Zero(t, metric(t, s.reg, "presenced_frames_lost_total", map[string]string{"type": "chat"}))
			})
		}
	}
}

// A close the server decides (here a disconnect) also waits for the frames
// read before it: a chat held by a stalled engine is handed over when the
// engine comes back, and the user leaves the channel only then.
func TestAServerCloseDrainsTheInboxFirst(t *testing.T) {
	e := &stallingEngine{Engine: presence.NewMemoryEngine(), gate: make(chan struct{}), held: make(chan string, 1)}
	cfg := testConfig()
	cfg.Engine = e
	// The chat must still be waiting when the test looks, however slow the
	// machine: a bound far past the test's own deadlines.
	s := startServerWith(t, cfg, serverOptions{handover: 10 * waitLong})
	var gate sync.Once
	t.Cleanup(func() { gate.Do(func() { close(e.gate) }) })
	w := s.observer(t, "lobby", "bob")
	s.step(1)
	ws, _ := s.dialIn(t, "alice", "lobby")
	s.step(1)
	w.until(t, `{"type":"presence","channel":"lobby","count":2,"joins":["alice"],"leaves":[]}`)
	send(t, ws, `{"type":"chat","channel":"lobby","text":"last words"}`)
	// The engine holds the chat: it was read and handed over before the
	// close. (A frame still being read when the server closes may come
	// after the close, and is counted lost: TestAChatLostAfterTheCloseIsCounted.)
	select {
	case from := <-e.held:
		require.Equal(t, "alice", from)
	case <-time.After(waitLong):
		require.FailNow(t, "the chat never reached the engine")
	}
	require.NoError(t, s.hub.Disconnect(context.Background(), "alice"))
	for {
		if _, _, err := ws.ReadMessage(); err != nil {
			break // alice is closed at once
		}
	}
	n, err := s.hub.Online(context.Background(), "alice")
	require.NoError(t, err)
	assert.Equal(t, 1, n, "alice still counts while her chat waits")
	gate.Do(func() { close(e.gate) })
	w.until(t, `{"type":"chat","channel":"lobby","from":"alice","text":"last words"}`)
	require.Eventually(t, func() bool {
		n, err := s.hub.Online(context.Background(), "alice")
		return err == nil && n == 0
	}, waitLong, time.Millisecond)
	s.step(1)
	w.until(t, `{"type":"presence","channel":"lobby","count":1,"joins":[],"leaves":["alice"]}`)
}

// What cannot be handed over in time after a close is counted: nobody is
// left to tell.
func TestAChatLostAfterTheCloseIsCounted(t *testing.T) {
	e := &stallingEngine{Engine: presence.NewMemoryEngine(), gate: make(chan struct{})}
	t.Cleanup(func() { close(e.gate) })
	cfg := testConfig()
	cfg.Engine = e
	s := startServerWith(t, cfg, serverOptions{handover: 100 * time.Millisecond})
	c, _ := s.rawJoined(t, "alice", "lobby")
	write(t, c, textFrame(`{"type":"chat","channel":"lobby","text":"never"}`))
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	s.waitMetric(t, "presenced_frames_lost_total", map[string]string{"type": "chat"}, 1)
	require.Eventually(t, func() bool {
		n, err := s.hub.Online(context.Background(), "alice")
		return err == nil && n == 0
	}, waitLong, time.Millisecond, "alice goes once her chat gave up")
}
