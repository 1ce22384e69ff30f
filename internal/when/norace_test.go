//go:build !race

package when

const raceEnabled = false
