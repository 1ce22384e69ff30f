package store

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"
)

var testEpoch = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// newClock returns a clock that advances one second per call, so that every
// change has a distinct, predictable time.
func newClock() func() time.Time {
	var n atomic.Int64
	return func() time.Time { return testEpoch.Add(time.Duration(n.Add(1)) * time.Second) }
}

func openTest(t testing.TB, dir string, opts FileOptions) *FileStore {
	t.Helper()
	if opts.Now == nil {
		opts.Now = newClock()
	}
	s, err := OpenFile(dir, opts)
	if err != nil {
		t.Fatalf("OpenFile(%q) = %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }
