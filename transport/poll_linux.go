//go:build linux

package transport

import (
	"fmt"
	"os"
	"sync"
	"syscall"
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

	mu    sync.Mutex
	conns []*conn // by socket descriptor; nil where none is registered
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
	syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
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

// run wakes the connections whose sockets become readable, until close.
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
		if err := p.raw.Read(wait); err != nil {
			return // closed
		}
		if werr != nil {
			continue // EINTR; nothing else can fail on a valid descriptor
		}
		p.mu.Lock()
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
