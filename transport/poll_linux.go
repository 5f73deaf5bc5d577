//go:build linux

package transport

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/presenced/presenced/internal/lockorder"
)

// poller waits for readable sockets, and for writable ones under a
// blocked write, with one epoll instance, so that an idle connection holds
// no goroutine. The epoll descriptor is itself waited
// on by the Go runtime's netpoller: no thread blocks in epoll_wait.
//
// Sockets are registered edge-triggered: a worker reads until the socket
// has nothing more (EAGAIN) before it goes idle, and a wake while it runs
// makes it read again (conn.wake).
type poller struct {
	epfd int
	file *os.File // epfd, for the runtime's netpoller
	raw  syscall.RawConn

	mu    lockorder.Mutex[lockorder.Poller]
	conns []*conn // by socket descriptor; nil where none is registered
	n     int     // registered connections
	// expiring are the connections whose read deadline (a close frame's
	// answer) the loop wakes them at, in deadline order: every one is the
	// Hub's CloseTimeout after its close frame, so appending keeps the order.
	// The epoll file's read deadline is the first one's. A timer per
	// connection would start a goroutine per expiry, and a tick that closes
	// thousands of silent clients would leave as many goroutine records
	// behind, which the runtime never frees.
	expiring []*conn
}

// epollET is EPOLLET as an event mask (syscall declares it negative).
const epollET = 1 << 31

func newPoller() (*poller, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("transport: poller: %w", os.NewSyscallError("epoll_create1", err))
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("transport: poller: %w", os.NewSyscallError("setnonblock", err))
	}
	p := &poller{epfd: fd, file: os.NewFile(uintptr(fd), "epoll")}
	if p.raw, err = p.file.SyscallConn(); err != nil {
		p.file.Close()
		return nil, fmt.Errorf("transport: poller: %w", err)
	}
	return p, nil
}

// add registers c's socket. Events may arrive at once: the first one finds
// c in the table, which is filled under the lock the event loop takes.
func (p *poller) add(c *conn) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	fd := int(c.w.sock.fd)
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLOUT | syscall.EPOLLRDHUP | epollET, Fd: int32(fd)}
	if err := syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	if fd >= len(p.conns) {
		p.conns = append(p.conns, make([]*conn, fd+1-len(p.conns))...)
	}
	p.conns[fd] = c
	p.n++
	return nil
}

// remove unregisters c's socket. The socket calls it before it closes its
// descriptor, so that once reused the descriptor cannot reach c.
func (p *poller) remove(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fd := int(c.w.sock.fd)
	if fd >= len(p.conns) || p.conns[fd] != c {
		return
	}
	p.conns[fd] = nil
	p.n--
	syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
}

// count is how many connections are registered.
func (p *poller) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// appendConns appends the connections registered to live.
func (p *poller) appendConns(live []*conn) []*conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		if c != nil {
			live = append(live, c)
		}
	}
	return live
}

// expire has run wake c at its read deadline t.
func (p *poller) expire(c *conn, t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expiring = append(p.expiring, c)
	if len(p.expiring) == 1 {
		p.file.SetReadDeadline(t)
	}
}

// appendExpired moves the connections whose read deadline has passed (or
// was lifted) to ready, and arms the file's deadline for the next one.
// p.mu is held.
func (p *poller) appendExpired(ready []*conn) []*conn {
	now := time.Now().UnixNano()
	i := 0
	for ; i < len(p.expiring); i++ {
		if d := p.expiring[i].w.deadline.Load(); d > now {
			break
		}
	}
	ready = append(ready, p.expiring[:i]...)
	n := copy(p.expiring, p.expiring[i:])
	clear(p.expiring[n:])
	p.expiring = p.expiring[:n]
	next := time.Time{}
	if n > 0 {
		next = time.Unix(0, p.expiring[0].w.deadline.Load())
	}
	p.file.SetReadDeadline(next)
	return ready
}

// run wakes the connections whose sockets become readable or whose read
// deadline passes, until close.
func (p *poller) run() {
	events := make([]syscall.EpollEvent, 256)
	ready := make([]*conn, 0, len(events))
	var n int
	var werr error
	wait := func(fd uintptr) bool {
		n, werr = syscall.EpollWait(int(fd), events, 0)
		return n > 0 || werr != nil
	}
	for {
		err := p.raw.Read(wait)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return // closed
		}
		p.mu.Lock()
		if err != nil {
			ready = p.appendExpired(ready)
			n = 0
		} else if werr != nil {
			n = 0 // EINTR; nothing else can fail on a valid descriptor
		}
		for _, ev := range events[:n] {
			if fd := int(ev.Fd); fd < len(p.conns) && p.conns[fd] != nil {
				c := p.conns[fd]
				failed := ev.Events&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0
				if failed {
					c.w.hup.Store(true)
				}
				if failed || ev.Events&syscall.EPOLLOUT != 0 {
					c.w.sock.wakeWriter()
				}
				// Every edge reports the whole readiness: a socket that is
				// writable reports EPOLLOUT with each read edge too.
				if failed || ev.Events&syscall.EPOLLIN != 0 {
					ready = append(ready, c)
				}
			}
		}
		p.mu.Unlock()
		for i, c := range ready {
			c.wake()
			ready[i] = nil
		}
		ready = ready[:0]
	}
}

// close stops run. Connections still registered are not woken.
func (p *poller) close() { p.file.Close() }
