package main

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"
)

// races is what alice's connections heard over the rounds of reconnects.
type races struct {
	told      int      // status frames that told a live connection of alice that alice is offline
	samples   []string // some of those
	statuses  int      // every status frame
	notOnline int      // watching answers without alice online
}

// reconnects closes and at once reopens a connection of alice watching
// alice, rounds times, on nodes[i%len(nodes)], each living dwell.
func reconnects(nodes []*proc, rounds int, dwell time.Duration) (races, error) {
	var toldN, statusN, notOnlineN atomic.Int64
	var mu sync.Mutex
	var samples []string
	var cur *client
	var curGone *atomic.Bool
	stop := func() {
		if cur != nil {
			curGone.Store(true)
			cur.close()
		}
	}
	for i := range rounds {
		stop()
		n := nodes[i%len(nodes)]
		watching := make(chan struct{}, 1)
		gone := new(atomic.Bool) // set before the harness closes it
		c, err := connect(n.Addr, "alice", "", func(f *frame, raw []byte) {
			switch f.Type {
			case "watching":
				if !slices.Contains(f.Online, "alice") && notOnlineN.Add(1) <= 3 {
					progress("reconnect: round %d on %s: %s", i, n.Name, raw)
				}
				select {
				case watching <- struct{}{}:
				default:
				}
			case "status":
				if statusN.Add(1) <= 3 {
					progress("reconnect: round %d on %s heard %s", i, n.Name, raw)
				}
				if slices.Contains(f.Offline, "alice") && !gone.Load() {
					toldN.Add(1)
					mu.Lock()
					samples = append(samples, fmt.Sprintf("round %d on %s: %s", i, n.Name, raw))
					mu.Unlock()
				}
			}
		})
		if err != nil {
			return races{}, fmt.Errorf("dial alice: %w", err)
		}
		cur, curGone = c, gone
		if err := c.send(`{"type":"watch","uids":["alice"]}`); err != nil {
			stop()
			return races{}, fmt.Errorf("watch: %w", err)
		}
		select {
		case <-watching:
		case <-time.After(5 * time.Second):
			progress("reconnect: round %d: no watching frame", i)
		}
		time.Sleep(dwell)
	}
	time.Sleep(2 * time.Second) // late frames reach the last connection
	stop()
	mu.Lock()
	defer mu.Unlock()
	return races{told: int(toldN.Load()), samples: samples, statuses: int(statusN.Load()), notOnline: int(notOnlineN.Load())}, nil
}

// reconnect: alice closes and dials again at once, on one node, then
// alternating between two nodes on one Redis.
func reconnect(r *run) ([]row, error) {
	const rounds = 30
	dwell := 300 * time.Millisecond
	args := []string{"-slots", "11", "-tick", "200ms"}
	p, err := r.startPresenced("reconnect", args...)
	if err != nil {
		return nil, err
	}
	one, err := reconnects([]*proc{p}, rounds, dwell)
	p.stop()
	if err != nil {
		return nil, err
	}
	r.figures("reconnect-one", "%d of %d reconnects told alice offline on a live connection %v; status frames heard by alice: %d; watching answers without alice online: %d",
		one.told, rounds, one.samples, one.statuses, one.notOnline)

	rd, err := r.startRedis()
	if err != nil {
		return nil, err
	}
	defer rd.stop()
	url := "redis://" + rd.Addr + "/0"
	n1, err := r.startPresenced("n1", append(args, "-redis", url, "-node", "n1")...)
	if err != nil {
		return nil, err
	}
	defer n1.stop()
	n2, err := r.startPresenced("n2", append(args, "-redis", url, "-node", "n2")...)
	if err != nil {
		return nil, err
	}
	defer n2.stop()
	two, err := reconnects([]*proc{n1, n2}, rounds, dwell)
	if err != nil {
		return nil, err
	}
	r.figures("reconnect-two", "%d of %d reconnects told alice offline on a live connection %v; status frames heard by alice: %d; watching answers without alice online: %d",
		two.told, rounds, two.samples, two.statuses, two.notOnline)
	how := "`-slots 11 -tick 200ms`; alice (watching alice) closes (close frame) and dials again at once, 30 times, each connection living 300 ms after its `watching`; status frames with alice offline counted on connections the harness had not closed"
	return []row{
		{"4a. reconnect races, one node", fmt.Sprintf("%d in %d", one.told, rounds), how},
		{"4b. reconnect races, two nodes on one Redis, alternating", fmt.Sprintf("%d in %d", two.told, rounds), how + "; redis-server 7 on loopback, `-node n1`/`n2`"},
	}, nil
}

// connCap: one user opens 2,000 sockets.
func connCap(r *run) ([]row, error) {
	const tries = 2000
	p, err := r.startPresenced("cap")
	if err != nil {
		return nil, err
	}
	defer p.stop()
	var ok []*websocket.Conn
	statuses := map[string]int{}
	for range tries {
		ws, res, err := dial(p.Addr, "uid=crowd", nil)
		switch {
		case err == nil:
			ok = append(ok, ws)
		case res != nil:
			statuses[strconv.Itoa(res.StatusCode)]++
			res.Body.Close()
		default:
			statuses[err.Error()]++
		}
	}
	for _, ws := range ok {
		ws.Close()
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(statuses)) {
		parts = append(parts, fmt.Sprintf("%d× %s", statuses[k], k))
	}
	refused := cmp.Or(strings.Join(parts, ", "), "none refused")
	r.figures("cap", "%d dials of one user: %d upgraded, refused: %s", tries, len(ok), refused)
	return []row{{
		"5. one user opens 2,000 sockets",
		fmt.Sprintf("%d upgraded, %s", len(ok), refused),
		"2,000 sequential dials of `?uid=crowd`, all kept open until the end",
	}}, nil
}

// invalidUTF8: a text frame whose text is not UTF-8.
func invalidUTF8(r *run) ([]row, error) {
	p, err := r.startPresenced("utf8")
	if err != nil {
		return nil, err
	}
	defer p.stop()
	ws, _, err := dial(p.Addr, "uid=alice&channels=lobby", nil)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	defer ws.Close()
	ws.WriteMessage(websocket.TextMessage, []byte("{\"type\":\"chat\",\"channel\":\"lobby\",\"text\":\"\xff\xfe\"}"))
	ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got []string // the types of the frames read since the dial
	for err == nil {
		var data []byte
		if _, data, err = ws.ReadMessage(); err == nil {
			var f frame
			json.Unmarshal(data, &f)
			got = append(got, cmp.Or(f.Type, "?"))
		}
	}
	end := endDetail(err)
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		end = "not closed within 5 s"
	}
	end += fmt.Sprintf(" (frames read: %s)", cmp.Or(strings.Join(got, ", "), "none"))
	r.figures("utf8", "a text frame with bytes ff fe: %s", end)
	return []row{{"6. text frame with invalid UTF-8", end, "a chat frame whose text holds bytes `ff fe` sent right after the dial; frames read until the close, or for 5 s"}}, nil
}

// jwtBasic: in JWT mode, a Basic Authorization header, as a proxy in front
// may add, next to a valid ?token=.
func jwtBasic(r *run) ([]row, error) {
	const secret = "s"
	p, err := r.startPresenced("jwt", "-jwt-secret", secret)
	if err != nil {
		return nil, err
	}
	defer p.stop()
	claims := jwt.RegisteredClaims{Subject: "alice", ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
	if err != nil {
		return nil, fmt.Errorf("sign token: %w", err)
	}
	try := func(query string, hdr http.Header) string {
		ws, res, err := dial(p.Addr, query, hdr)
		if err != nil {
			if res != nil {
				return "refused " + strconv.Itoa(res.StatusCode)
			}
			return err.Error()
		}
		defer ws.Close()
		ws.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, data, err := ws.ReadMessage()
		if err != nil {
			return "upgraded, then " + endDetail(err)
		}
		var f struct{ Type, UID string }
		json.Unmarshal(data, &f)
		return fmt.Sprintf("accepted (%s as %s)", f.Type, f.UID)
	}
	basic := http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("proxy:secret"))}}
	both := try("token="+tok, basic)
	bearer := try("", http.Header{"Authorization": {"Bearer " + tok}})
	none := try("", basic)
	r.figures("jwt", "Basic header + ?token=: %s; Bearer header alone: %s; Basic header alone: %s", both, bearer, none)
	return []row{{"7. JWT mode: `Authorization: Basic ...` plus `?token=`", both,
		"`-jwt-secret s`; HS256 token with `sub` and `exp`; controls: Bearer alone " + bearer + ", Basic alone " + none}}, nil
}
