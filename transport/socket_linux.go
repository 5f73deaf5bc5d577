//go:build linux

package transport

import (
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// socket is a polled connection's TCP descriptor, taken over from package
// net once the WebSocket is open: net keeps, per connection, a poll
// descriptor with two deadline timers outside the heap and the two
// addresses on it, more than any other part of an idle connection that is
// not gorilla's. Reads happen when the poller reports the socket readable;
// a write that finds the send buffer full waits until the poller reports
// it writable, or until its deadline.
//
// The descriptor is closed only once no read or write is using it: refs
// counts those in flight, and closedRefs marks the socket closed, after
// which none starts. So a descriptor number reused by the next accepted
// connection never reaches this one's syscalls.
type socket struct {
	owner     *conn
	fd        int32
	refs      atomic.Int32
	wdeadline atomic.Int64                  // UnixNano; 0: none
	writable  atomic.Pointer[chan struct{}] // closed when a blocked write may go on
}

const closedRefs = 1 << 30

// adopt takes a duplicate of nc's descriptor, which shares its open file
// and so its non-blocking mode. The caller closes nc once the duplicate is
// registered, which frees what net kept for it.
func (s *socket) adopt(owner *conn, nc net.Conn) error {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return fmt.Errorf("transport: %T has no descriptor", nc)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	fd := -1
	var derr error
	if err := raw.Control(func(f uintptr) {
		r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, f, syscall.F_DUPFD_CLOEXEC, 0)
		if errno != 0 {
			derr = os.NewSyscallError("fcntl", errno)
			return
		}
		fd = int(r)
	}); err != nil {
		return err
	}
	if derr != nil {
		return derr
	}
	s.owner, s.fd = owner, int32(fd)
	return nil
}

// abandon closes a descriptor that adopt took and nothing else uses.
func (s *socket) abandon() { syscall.Close(int(s.fd)) }

func (s *socket) setWriteDeadline(t time.Time) { s.wdeadline.Store(unixNano(t)) }

func (s *socket) acquire() bool {
	for {
		r := s.refs.Load()
		if r&closedRefs != 0 {
			return false
		}
		if s.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

func (s *socket) release() {
	if s.refs.Add(-1) == closedRefs {
		s.destroy()
	}
}

// close marks s closed and wakes a blocked write; the descriptor goes when
// the last read or write in flight ends. It reports false if s was closed
// already.
func (s *socket) close() bool {
	for {
		r := s.refs.Load()
		if r&closedRefs != 0 {
			return false
		}
		if s.refs.CompareAndSwap(r, r|closedRefs) {
			s.wakeWriter()
			if r == 0 {
				s.destroy()
			}
			return true
		}
	}
}

// destroy unregisters the descriptor before closing it, so that once
// reused it cannot reach the owner.
func (s *socket) destroy() {
	s.owner.hub.poller.remove(s.owner)
	syscall.Close(int(s.fd))
}

func (s *socket) closed() bool { return s.refs.Load()&closedRefs != 0 }

// read reads once without blocking; syscall.EAGAIN says there is nothing.
func (s *socket) read(p []byte) (int, error) { return s.once(rawRead, p) }

// writeOnce writes what of p the send buffer takes now, without waiting;
// syscall.EAGAIN says it took nothing.
func (s *socket) writeOnce(p []byte) (int, error) {
	n, err := s.once(rawWrite, p)
	return max(n, 0), err
}

// rawRead and rawWrite are read(2) and write(2) on the non-blocking
// descriptor, made without telling the scheduler, as the runtime makes its
// own calls that cannot block: they return at once, and the microseconds
// one spends in the kernel (on loopback, a write delivers the segment) are
// work like any other. Through syscall.Read and syscall.Write the goroutine's
// P is marked as in a syscall each time, and under load sysmon keeps
// retaking it and waking threads to run what waits.
func rawRead(fd int, p []byte) (int, error)  { return rawIO(syscall.SYS_READ, fd, p) }
func rawWrite(fd int, p []byte) (int, error) { return rawIO(syscall.SYS_WRITE, fd, p) }

func rawIO(trap uintptr, fd int, p []byte) (int, error) {
	var buf unsafe.Pointer
	if len(p) > 0 {
		buf = unsafe.Pointer(&p[0])
	}
	n, _, errno := syscall.RawSyscall(trap, uintptr(fd), uintptr(buf), uintptr(len(p)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// once runs one read or write on the descriptor unless s is closed,
// again if a signal interrupted it.
func (s *socket) once(op func(fd int, p []byte) (int, error), p []byte) (int, error) {
	if !s.acquire() {
		return 0, net.ErrClosed
	}
	defer s.release()
	for {
		n, err := op(int(s.fd), p)
		if err != syscall.EINTR {
			return n, err
		}
	}
}

// write writes all of p, waiting while the send buffer is full, until the
// write deadline.
func (s *socket) write(p []byte) (int, error) {
	if !s.acquire() {
		return 0, net.ErrClosed
	}
	defer s.release()
	done := 0
	var wake chan struct{}
	for done < len(p) {
		n, err := rawWrite(int(s.fd), p[done:])
		if n > 0 {
			done += n
		}
		switch err {
		case nil, syscall.EINTR:
		case syscall.EAGAIN:
			if wake == nil {
				// Published before the next attempt: a buffer that drains
				// after that attempt fails finds wake and closes it.
				wake = make(chan struct{})
				published := wake // its own variable: wake would escape every write
				s.writable.Store(&published)
				if s.closed() {
					return done, net.ErrClosed
				}
				continue
			}
			if err := s.waitWritable(wake); err != nil {
				return done, err
			}
			wake = nil
		default:
			return done, err
		}
	}
	return done, nil
}

func (s *socket) waitWritable(wake chan struct{}) error {
	var timeout <-chan time.Time
	if d := s.wdeadline.Load(); d != 0 {
		left := time.Until(time.Unix(0, d))
		if left <= 0 {
			return os.ErrDeadlineExceeded
		}
		t := time.NewTimer(left)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-wake:
		if s.closed() {
			return net.ErrClosed
		}
		return nil
	case <-timeout:
		return os.ErrDeadlineExceeded
	}
}

// wakeWriter lets a blocked write try again: the poller calls it when the
// socket may take more, close when the write must end.
func (s *socket) wakeWriter() {
	// A load first: every read edge reports EPOLLOUT too, and almost never
	// finds a write waiting.
	if s.writable.Load() == nil {
		return
	}
	if w := s.writable.Swap(nil); w != nil {
		close(*w)
	}
}

// addr returns the socket's local or peer address.
func (s *socket) addr(name func(int) (syscall.Sockaddr, error)) net.Addr {
	var sa syscall.Sockaddr
	if s.acquire() {
		sa, _ = name(int(s.fd))
		s.release()
	}
	switch sa := sa.(type) {
	case *syscall.SockaddrInet4:
		return &net.TCPAddr{IP: sa.Addr[:], Port: sa.Port}
	case *syscall.SockaddrInet6:
		return &net.TCPAddr{IP: sa.Addr[:], Port: sa.Port}
	}
	return &net.TCPAddr{} // closed
}

func (s *socket) localAddr() net.Addr  { return s.addr(syscall.Getsockname) }
func (s *socket) remoteAddr() net.Addr { return s.addr(syscall.Getpeername) }
