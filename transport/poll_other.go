//go:build !linux

package transport

import (
	"errors"
	"net"
	"time"
)

// poller exists only where epoll does: elsewhere every connection parks a
// reader goroutine.
type poller struct{}

func newPoller() (*poller, error) {
	return nil, errors.New("transport: no poller on this system: one reader goroutine per connection")
}

func (p *poller) add(*conn) error                  { return errors.New("transport: no poller") }
func (p *poller) remove(*conn)                     {}
func (p *poller) expire(*conn, time.Time)          {}
func (p *poller) appendConns(live []*conn) []*conn { return live }
func (p *poller) count() int                       { return 0 }
func (p *poller) run()                             {}
func (p *poller) close()                           {}

// socket is where a polled connection's descriptor lives on Linux; here no
// connection is polled, so none is used.
type socket struct{}

var errNotPolled = errors.New("transport: no polled sockets on this system")

func (s *socket) adopt(*conn, net.Conn) error   { return errNotPolled }
func (s *socket) abandon()                      {}
func (s *socket) setWriteDeadline(time.Time)    {}
func (s *socket) read([]byte) (int, error)      { return 0, errNotPolled }
func (s *socket) write([]byte) (int, error)     { return 0, errNotPolled }
func (s *socket) writeOnce([]byte) (int, error) { return 0, errNotPolled }
func (s *socket) close() bool                   { return false }
func (s *socket) closed() bool                  { return false }
func (s *socket) wakeWriter()                   {}
func (s *socket) localAddr() net.Addr           { return &net.TCPAddr{} }
func (s *socket) remoteAddr() net.Addr          { return &net.TCPAddr{} }
