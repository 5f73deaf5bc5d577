// Package shrink gives a map's memory back after churn: Go maps keep the
// buckets of their largest size, so a map that once held a million users
// holds their memory after they left.
package shrink

// minPeak is the size below which a map is never rebuilt: small maps cost
// little, and rebuilding them would only churn.
const minPeak = 1024

// Map returns m, or a copy of m sized for what it holds when it holds under a
// quarter of its peak. Call it after deleting from m; peak keeps the size m
// reached (a delete has just taken one away). A copy costs O(len), once per
// three quarters of the peak deleted: O(1) per delete.
func Map[K comparable, V any](m map[K]V, peak *int) map[K]V {
	*peak = max(*peak, len(m)+1)
	if *peak < minPeak || len(m)*4 >= *peak {
		return m
	}
	c := make(map[K]V, len(m))
	for k, v := range m {
		c[k] = v
	}
	*peak = len(c)
	return c
}

// Put stores v under k in m, or deletes k when v is the zero value, and
// returns m as Map does: for maps where the zero value is nothing kept.
func Put[K, V comparable](m map[K]V, k K, v V, peak *int) map[K]V {
	var zero V
	if v != zero {
		m[k] = v
		return m
	}
	delete(m, k)
	return Map(m, peak)
}
