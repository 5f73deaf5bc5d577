package cluster

import (
	"strconv"
	"strings"
)

// A logID is a log entry's ID, "<ms>-<n>", as Redis orders them.
type logID struct{ ms, n uint64 }

func parseLogID(s string) (logID, bool) {
	ms, n, ok := strings.Cut(s, "-")
	if !ok {
		return logID{}, false
	}
	a, err1 := strconv.ParseUint(ms, 10, 64)
	b, err2 := strconv.ParseUint(n, 10, 64)
	return logID{a, b}, err1 == nil && err2 == nil
}

func (id logID) after(o logID) bool { return id.ms > o.ms || (id.ms == o.ms && id.n > o.n) }

func (id logID) String() string {
	return strconv.FormatUint(id.ms, 10) + "-" + strconv.FormatUint(id.n, 10)
}
