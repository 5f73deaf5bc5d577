package main

import (
	"fmt"
	"sync"
	"syscall"
	"time"
)

// keepBeating posts a heartbeat for each of uids every period until stop.
func keepBeating(base string, uids []string, period time.Duration, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			heartbeats(base, 0, len(uids), 16, func(i int) string { return "uid=" + uids[i] })
			select {
			case <-stop:
				return
			case <-time.After(period):
			}
		}
	})
	return &wg
}

// lostNodeCase is one way of losing a node: node n1 holds held heartbeat
// users, clients on n2 watch the first watched of them, then n1 gets sig.
type lostNodeCase struct {
	sigName                string
	sig                    syscall.Signal
	held, clients, watched int
}

// lostNodeResult is what the watchers on n2 saw after the signal.
type lostNodeResult struct {
	closed     int    // watchers n2 closed
	how        string // their closes, by how
	offlineIn  time.Duration
	allOffline bool // every watcher saw every watched user offline
}

// lostNode runs lc on two fresh nodes and a fresh redis-server.
func (r *run) lostNode(lc lostNodeCase) (lostNodeResult, error) {
	var res lostNodeResult
	args := []string{"-slots", "11", "-tick", "400ms", "-max-message", "32768"}
	rd, err := r.startRedis()
	if err != nil {
		return res, err
	}
	defer rd.stop()
	url := "redis://" + rd.Addr + "/0"
	n1, err := r.startPresenced("n1-"+lc.sigName, append(args, "-redis", url, "-node", "n1")...)
	if err != nil {
		return res, err
	}
	defer n1.stop()
	n2, err := r.startPresenced("n2-"+lc.sigName, append(args, "-redis", url, "-node", "n2")...)
	if err != nil {
		return res, err
	}
	defer n2.stop()
	hb := ids("hb-", lc.held)
	stop := make(chan struct{})
	beating := keepBeating(n1.http(), hb, time.Second, stop)
	cs, ws, err := watchers(n2.Addr, "w-", lc.clients, "", hb[:lc.watched])
	if err != nil {
		close(stop)
		beating.Wait()
		return res, err
	}
	defer closeAll(cs)
	if !waitFor(20*time.Second, func() bool {
		for _, w := range ws {
			if w.online.Load() != int64(lc.watched) {
				return false
			}
		}
		return true
	}) {
		progress("cluster: not every watcher saw %d online", lc.watched)
	}
	time.Sleep(time.Second)
	n1.signal(lc.sig)
	killed := time.Now()
	close(stop)
	beating.Wait()
	res.allOffline = waitFor(30*time.Second, func() bool {
		for i, w := range ws {
			if w.online.Load() != 0 && !cs[i].isEnded() {
				return false
			}
		}
		return true
	})
	res.offlineIn = time.Since(killed)
	time.Sleep(2 * time.Second)
	res.closed, res.how = tally(cs)
	m := metrics(n2.http())
	r.figures("cluster-"+lc.sigName, "n1 holds %d heartbeat users, %d clients on n2 watch %d of them; after %s: survivors closed %d (%s); "+
		"every watcher saw them all offline: %v, %v after the signal; n2 closes: %s",
		lc.held, lc.clients, lc.watched, lc.sigName, res.closed, res.how, res.allOffline, res.offlineIn.Round(time.Millisecond), closesByReason(m))
	return res, nil
}

// outcome is the table cell of res for a case with clients watchers.
func (res lostNodeResult) outcome(clients int) string {
	s := fmt.Sprintf("%d of %d closed", res.closed, clients)
	if res.closed > 0 {
		s += " (" + res.how + ")"
	}
	if res.allOffline {
		s += fmt.Sprintf("; all offline on every watcher %.1f s after the signal", res.offlineIn.Seconds())
	} else {
		s += "; not every watcher saw every offline"
	}
	return s
}

// cluster: one of two nodes on one Redis is lost, killed or stopped, while
// clients on the other watch its users.
func cluster(r *run) ([]row, error) {
	kill := lostNodeCase{sigName: "SIGKILL", sig: syscall.SIGKILL, held: 2000, clients: 1000, watched: 1000}
	term := lostNodeCase{sigName: "SIGTERM", sig: syscall.SIGTERM, held: 400, clients: 20, watched: 400}
	k, err := r.lostNode(kill)
	if err != nil {
		return nil, err
	}
	t, err := r.lostNode(term)
	if err != nil {
		return nil, err
	}
	how := "two nodes (`-slots 11 -tick 400ms`, a 4 s timeout) on one redis-server; heartbeats posted to n1 every second until the signal; the watchers on n2 read at network speed and answer pings"
	return []row{
		{"10a. cluster: node with 2,000 heartbeat users SIGKILLed, 1,000 clients on the other node watch 1,000 of them", k.outcome(kill.clients), how},
		{"10b. cluster: node with 400 heartbeat users SIGTERMed, 20 clients on the other node watch them", t.outcome(term.clients), how},
	}, nil
}
