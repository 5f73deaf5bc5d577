package transport

// NewManual returns a Hub whose ring steps only when Step is called, so a
// test decides when time passes.
func NewManual(cfg Config) (*Hub, error) { return newHub(cfg, true) }

// Step steps the ring once, as one tick of the clock would, and returns
// when the step's callbacks have run: idle pings and closes are queued,
// leases and grace periods have stepped, and the tick's presence frames are
// queued.
func (h *Hub) Step() {
	h.tracker.Advance()
	h.tracker.Settle()
}
