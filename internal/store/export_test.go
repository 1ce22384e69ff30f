package store

import "testing"

// Compact rewrites the journal of s, a *FileStore, as a checkpoint now,
// for the conformance suite's compacted cases (conformance_test.go).
func Compact(t *testing.T, s Store) {
	t.Helper()
	fs := s.(*FileStore)
	fs.wmu.Lock()
	fs.j.nextCompact = 0
	fs.compactBytes = 1
	fs.maybeCompact()
	fs.wmu.Unlock()
	if fs.j.size != fs.j.base {
		t.Fatalf("journal is %d bytes after compaction, checkpoint %d", fs.j.size, fs.j.base)
	}
}
