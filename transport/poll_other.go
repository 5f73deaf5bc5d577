//go:build !linux

package transport

import "errors"

// poller exists only where epoll does: elsewhere every connection parks a
// reader goroutine.
type poller struct{}

func newPoller() (*poller, error) {
	return nil, errors.New("transport: no poller on this system: one reader goroutine per connection")
}

func (p *poller) add(*conn) error { return errors.New("transport: no poller") }
func (p *poller) remove(*conn)    {}
func (p *poller) run()            {}
func (p *poller) close()          {}
