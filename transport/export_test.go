package transport

// NewManual returns a Hub whose ring steps only when Step is called, so a
// test decides when time passes.
func NewManual(cfg Config) (*Hub, error) { return newHub(cfg, true) }

// Step steps the ring once, as one tick of the clock would.
func (h *Hub) Step() { h.tracker.Advance() }
