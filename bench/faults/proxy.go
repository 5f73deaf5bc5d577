package main

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// linkMode is what a link does to the bytes it carries.
type linkMode int

const (
	pass      linkMode = iota
	stall              // holds bytes, delivers them in order on heal
	cut                // closes every connection, refuses new ones
	blackhole          // accepts, reads and throws bytes away
)

// link is one node's TCP path to Redis: a proxy on loopback that the
// nemesis can stall, cut or blackhole, and then heal.
type link struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	mode   linkMode
	healed chan struct{} // closed when mode goes back to pass
	pairs  map[*pair]struct{}
	wg     sync.WaitGroup
}

// pair is a client's connection and the proxy's to the target.
type pair struct {
	client, server net.Conn
	once           sync.Once
	closed         chan struct{}
	lost           bool // bytes were thrown away; guarded by link.mu
}

func (p *pair) close() {
	p.once.Do(func() {
		close(p.closed)
		p.client.Close()
		p.server.Close()
	})
}

// newLink listens on a free loopback port and forwards to target.
func newLink(target string) (*link, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("link to %s: %w", target, err)
	}
	l := &link{ln: ln, target: target, healed: make(chan struct{}), pairs: map[*pair]struct{}{}}
	close(l.healed)
	l.wg.Go(l.accept)
	return l, nil
}

// addr is where the node dials instead of Redis.
func (l *link) addr() string { return l.ln.Addr().String() }

func (l *link) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return // closed
		}
		l.mu.Lock()
		refused := l.mode == cut
		l.mu.Unlock()
		if refused {
			c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", l.target, 2*time.Second)
		if err != nil {
			c.Close() // Redis is down: the node sees what it would see
			continue
		}
		p := &pair{client: c, server: s, closed: make(chan struct{})}
		l.mu.Lock()
		if l.pairs == nil { // closed meanwhile
			l.mu.Unlock()
			p.close()
			return
		}
		l.pairs[p] = struct{}{}
		l.mu.Unlock()
		l.wg.Go(func() { l.pump(p, c, s) })
		l.wg.Go(func() { l.pump(p, s, c) })
	}
}

// pump copies src to dst through the link's mode until either side ends.
func (l *link) pump(p *pair, src, dst net.Conn) {
	defer func() {
		p.close()
		l.mu.Lock()
		delete(l.pairs, p)
		l.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !l.deliver(p, dst, buf[:n]) {
			return
		}
		if err != nil {
			return
		}
	}
}

// deliver writes b to dst as the mode allows; false ends the pair.
func (l *link) deliver(p *pair, dst net.Conn, b []byte) bool {
	for {
		l.mu.Lock()
		mode, healed := l.mode, l.healed
		if mode == blackhole {
			p.lost = true
		}
		l.mu.Unlock()
		switch mode {
		case pass:
			_, err := dst.Write(b)
			return err == nil
		case stall:
			select {
			case <-healed:
			case <-p.closed:
				return false
			}
		case blackhole:
			return true
		default: // cut
			return false
		}
	}
}

// set puts the link in mode m: cut closes every connection now.
func (l *link) set(m linkMode) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mode == pass {
		l.healed = make(chan struct{})
	}
	l.mode = m
	if m == cut {
		for p := range l.pairs {
			p.close()
		}
	}
}

// heal lets bytes through again: held ones are delivered in order, and the
// connections that lost bytes in a blackhole are closed, as a peer that
// never got them would end up doing.
func (l *link) heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mode == pass {
		return
	}
	for p := range l.pairs {
		if p.lost {
			p.close()
		}
	}
	l.mode = pass
	close(l.healed)
}

// close stops the link and every connection through it.
func (l *link) close() error {
	err := l.ln.Close()
	l.mu.Lock()
	for p := range l.pairs {
		p.close()
	}
	l.pairs = nil
	l.mu.Unlock()
	l.heal()
	l.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
