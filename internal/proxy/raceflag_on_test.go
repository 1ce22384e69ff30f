//go:build race

package proxy

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts through the pooled data plane are not meaningful.
const raceEnabled = true
