//go:build linux

package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"
)

// Connection states.
const (
	free      = iota // no connection on this descriptor
	upgrading        // accepted, the upgrade request not yet whole
	open             // upgraded: WebSocket frames
)

// conn is all a connection costs beyond the kernel's socket: 16 bytes.
type conn struct {
	last  int64 // unix nanoseconds of the last inbound frame (or the accept)
	state uint8
}

// server is one event loop over one epoll instance. Only Stop may be called
// from another goroutine.
type server struct {
	lfd     int
	epfd    int
	addr    netip.AddrPort
	timeout int64 // nanoseconds
	tick    time.Duration
	log     *slog.Logger
	stop    atomic.Bool

	conns []conn // indexed by file descriptor
	// partial holds the bytes of a request or frame that arrived in pieces:
	// rare on loopback, so it costs the common connection nothing.
	partial map[int32][]byte
	in      []byte // read buffer shared by every connection
	out     []byte // answers of one read, written with one write(2)
	scratch []byte // the accept key's input, then the welcome
}

const readBuffer = 64 << 10

// listen opens a non-blocking IPv4 listening socket on addr and its epoll
// instance.
func listen(addr string, timeout, tick time.Duration, log *slog.Logger) (*server, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return nil, fmt.Errorf("address %q: need an IPv4 host:port", addr)
	}
	lfd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	s := &server{lfd: lfd, epfd: -1, timeout: int64(timeout), tick: tick, log: log,
		partial: make(map[int32][]byte), in: make([]byte, readBuffer)}
	if err := s.bind(ap); err != nil {
		s.closeFDs()
		return nil, err
	}
	return s, nil
}

func (s *server) bind(ap netip.AddrPort) error {
	if err := syscall.SetsockoptInt(s.lfd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return fmt.Errorf("SO_REUSEADDR: %w", err)
	}
	if err := syscall.Bind(s.lfd, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
		return fmt.Errorf("bind %v: %w", ap, err)
	}
	if err := syscall.Listen(s.lfd, 4096); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	sa, err := syscall.Getsockname(s.lfd)
	if err != nil {
		return fmt.Errorf("getsockname: %w", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		return errors.New("getsockname: not an IPv4 address")
	}
	s.addr = netip.AddrPortFrom(netip.AddrFrom4(in4.Addr), uint16(in4.Port))
	if s.epfd, err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC); err != nil {
		return fmt.Errorf("epoll_create1: %w", err)
	}
	return s.watch(s.lfd)
}

// Addr is the address the server listens on.
func (s *server) Addr() netip.AddrPort { return s.addr }

// Stop makes Serve close every connection with 1001 and return within a tick.
func (s *server) Stop() { s.stop.Store(true) }

func (s *server) watch(fd int) error {
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: int32(fd)}
	if err := syscall.EpollCtl(s.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("epoll_ctl add %d: %w", fd, err)
	}
	return nil
}

// Serve runs the event loop on the calling goroutine until Stop.
func (s *server) Serve() error {
	defer s.closeFDs()
	events := make([]syscall.EpollEvent, 256)
	wait := int(s.tick.Milliseconds())
	next := time.Now().UnixNano() + int64(s.tick)
	for !s.stop.Load() {
		n, err := syscall.EpollWait(s.epfd, events, wait)
		if err != nil && !errors.Is(err, syscall.EINTR) {
			return fmt.Errorf("epoll_wait: %w", err)
		}
		now := time.Now().UnixNano()
		for _, ev := range events[:max(n, 0)] {
			if int(ev.Fd) == s.lfd {
				s.accept(now)
			} else {
				s.readable(int(ev.Fd), now)
			}
		}
		if now >= next {
			s.sweep(now)
			next = now + int64(s.tick)
		}
	}
	for fd := range s.conns {
		if s.conns[fd].state == open {
			s.closeWith(fd, closeGoingAway)
		} else if s.conns[fd].state == upgrading {
			s.drop(fd)
		}
	}
	return nil
}

func (s *server) accept(now int64) {
	for {
		fd, _, err := syscall.Accept4(s.lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		if err != nil {
			if !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EINTR) {
				s.log.Warn("accept", "err", err) // EMFILE and the like: the backlog waits
			}
			return
		}
		if fd >= len(s.conns) {
			s.conns = append(s.conns, make([]conn, fd+1-len(s.conns)+len(s.conns)/2)...)
		}
		if err := s.watch(fd); err != nil {
			s.log.Warn("watch", "err", err)
			_ = syscall.Close(fd)
			continue
		}
		s.conns[fd] = conn{last: now, state: upgrading}
	}
}

// readable reads what fd has and answers it with at most one write.
func (s *server) readable(fd int, now int64) {
	n, err := syscall.Read(fd, s.in)
	if err != nil && (errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR)) {
		return
	}
	if err != nil || n == 0 {
		s.drop(fd)
		return
	}
	data := s.in[:n]
	if p, ok := s.partial[int32(fd)]; ok {
		delete(s.partial, int32(fd))
		data = append(p, data...)
	}
	c := &s.conns[fd]
	s.out = s.out[:0]
	var rest []byte
	var end int // a close code to end with after the answers; 0: stay open
	if c.state == upgrading {
		rest, end = s.upgrade(c, data, now)
	} else {
		rest, end = s.frames(c, data, now)
	}
	if len(s.out) > 0 {
		if w, err := syscall.Write(fd, s.out); err != nil || w < len(s.out) {
			s.drop(fd) // broken, or too slow to take one write: the floor waits for nobody
			return
		}
	}
	switch {
	case end == dropNow:
		s.drop(fd)
	case end != 0:
		s.closeWith(fd, end)
	case len(rest) > 0:
		s.partial[int32(fd)] = append([]byte(nil), rest...)
	}
}

// sweep closes every connection silent for the timeout.
func (s *server) sweep(now int64) {
	for fd := range s.conns {
		c := &s.conns[fd]
		if c.state == free || now-c.last < s.timeout {
			continue
		}
		if c.state == open {
			s.closeWith(fd, closeIdle)
		} else {
			s.drop(fd)
		}
	}
}

// closeWith sends a close frame with code and drops the connection.
func (s *server) closeWith(fd, code int) {
	_, _ = syscall.Write(fd, closeFrames[code])
	s.drop(fd)
}

func (s *server) drop(fd int) {
	_ = syscall.Close(fd) // also leaves the epoll set
	s.conns[fd] = conn{}
	delete(s.partial, int32(fd))
}

func (s *server) closeFDs() {
	if s.epfd >= 0 {
		_ = syscall.Close(s.epfd)
	}
	_ = syscall.Close(s.lfd)
}
