package transport

import "github.com/presenced/presenced/internal/wiretap"

// tap shows a text frame read (in) or written to wiretap.Frame, which only
// tests set; unset, it costs one branch.
func tap(in bool, data []byte) {
	if f := wiretap.Frame; f != nil {
		f(in, data)
	}
}
