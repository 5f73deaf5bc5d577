package transport

import "time"

// NewManual returns a Hub whose Node steps only when Step is called, so a
// test decides when time passes.
func NewManual(cfg Config) (*Hub, error) { return newHub(cfg, true) }

// NewManualHandover is NewManual with handover in place of the 2 s a chat
// may wait for the engine, for a test that stalls the engine on purpose and
// must not race that bound on a busy machine.
func NewManualHandover(cfg Config, handover time.Duration) (*Hub, error) {
	h, err := newHub(cfg, true)
	if err == nil {
		h.handover = handover
	}
	return h, err
}

// Step steps the Node's clock once, as one tick would, and returns when the
// step's work is done: idle pings and closes are queued, leases and grace
// periods have stepped, and the tick's presence frames are queued.
func (h *Hub) Step() { h.node.Step() }

// LiveWorkers counts the workers alive in the process, idle or not.
func LiveWorkers() int64 { return liveWorkers.Load() }

// ClientFrame builds a frame as a client sends it: first is the first
// header byte (FIN, RSV, opcode).
func ClientFrame(first byte, payload []byte, masked bool) []byte {
	return clientFrame(first, payload, masked)
}

// InboxLimit is how many frames one connection's inbox holds.
const InboxLimit = inboxLimit

// DropSpareFramers empties h's spare framers: the next connection to need
// one has one made.
func (h *Hub) DropSpareFramers() { h.dropSpareFramers() }

// SetSSEKeepalive makes h's streams carry a keepalive comment every d
// instead of every 15 s.
func (h *Hub) SetSSEKeepalive(d time.Duration) { h.sseKeepalive = d }
