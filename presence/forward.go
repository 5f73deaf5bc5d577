package presence

import (
	"context"
	"errors"
)

// A Forwarder is an Engine that carries a request to another node and its
// answer back, for what only the node holding a connection can answer:
// package transport forwards the POSTs of a Server-Sent Events stream this
// way, so a load balancer need not send a client's requests to one node.
type Forwarder interface {
	// Address names this node for Forward, for as long as the engine
	// runs; a restarted process has another.
	Address() string
	// Forward hands req to the node at address to, where it reaches the
	// Relay as a MessageForward, and returns that node's answer. It fails
	// when the request could not be handed over, or no answer came before
	// ctx ended (the node is gone, or slow: the request may still have
	// arrived); with an error that is ErrNoNode when the engine knows at
	// once that no node listens at to.
	Forward(ctx context.Context, to string, req []byte) ([]byte, error)
	// Answer sends the answer to the request of m, a MessageForward.
	Answer(ctx context.Context, m Message, answer []byte) error
}

// ErrNoForwarder is Forward's error on a Node whose Engine is no
// Forwarder: there is no other node to ask.
var ErrNoForwarder = errors.New("presence: the engine does not forward requests to other nodes")

// ErrNoNode is Forward's error when no node listens at the address asked:
// the node is gone, or never was (a forged session names one), so nothing
// it held lives on.
var ErrNoNode = errors.New("presence: no node listens at that address")

// Address is what Forwarder.Address says of this node, or "" when its Engine
// is no Forwarder.
func (n *Node) Address() string {
	if f, ok := n.engine.(Forwarder); ok {
		return f.Address()
	}
	return ""
}

// Forward hands req to the node at address to and returns its answer: see
// Forwarder.
func (n *Node) Forward(ctx context.Context, to string, req []byte) ([]byte, error) {
	f, ok := n.engine.(Forwarder)
	if !ok {
		return nil, ErrNoForwarder
	}
	return f.Forward(ctx, to, req)
}

// Answer answers the request of m, a MessageForward that reached OnForward's
// handler.
func (n *Node) Answer(ctx context.Context, m Message, answer []byte) error {
	f, ok := n.engine.(Forwarder)
	if !ok {
		return ErrNoForwarder
	}
	return f.Answer(ctx, m, answer)
}

// OnForward sets the handler of the requests other nodes forward here,
// replacing the one before (nil: none; a request nobody handles gets no
// answer). It runs on a goroutine of its own per request, so it may wait
// and call the Node.
func (n *Node) OnForward(handle func(m Message)) {
	if handle == nil {
		n.v.forwarded.Store(nil)
		return
	}
	n.v.forwarded.Store(&handle)
}

// forward hands a request from another node to OnForward's handler.
func (v *view) forward(m Message) {
	if h := v.forwarded.Load(); h != nil {
		go (*h)(m)
	}
}
