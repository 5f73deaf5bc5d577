//go:build race

package cluster

// raceEnabled: the race detector slows everything several times over.
const raceEnabled = true
