package store_test

import (
	"testing"

	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/store/storetest"
)

// fileHarness runs the conformance suite on file stores, each in a
// directory of its own (the store's name).
var fileHarness = storetest.Harness{
	Open: func(t *testing.T, dir string, historyLimit int) store.Store {
		s, err := store.OpenFile(dir, store.FileOptions{HistoryLimit: historyLimit, Now: storetest.Clock()})
		if err != nil {
			t.Fatalf("OpenFile(%q) = %v", dir, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	},
	Name:    func(t *testing.T) string { return t.TempDir() },
	Kind:    "file",
	Compact: store.Compact,
}

func TestSemantics(t *testing.T)       { storetest.Semantics(t, fileHarness) }
func TestErrorMessages(t *testing.T)   { storetest.ErrorMessages(t, fileHarness) }
func TestEntryAndHistory(t *testing.T) { storetest.EntryAndHistory(t, fileHarness) }
func TestMetaOp(t *testing.T)          { storetest.MetaOp(t, fileHarness) }
func TestHistoryPruning(t *testing.T)  { storetest.HistoryPruning(t, fileHarness) }
func TestNoAliasing(t *testing.T)      { storetest.NoAliasing(t, fileHarness) }
func TestClosed(t *testing.T)          { storetest.Closed(t, fileHarness) }
func TestCanceledContext(t *testing.T) { storetest.CanceledContext(t, fileHarness) }
func TestChanges(t *testing.T)         { storetest.Changes(t, fileHarness) }
