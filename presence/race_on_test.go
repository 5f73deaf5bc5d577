//go:build race

package presence

const raceEnabled = true
