package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestCorruptSaysHowToRecover damages a journal and checks that the error
// the gateway refuses to start with tells the operator what to do, and
// that doing it works: damage to a change leaves the state before it,
// which truncating the file at the named offset serves.
func TestCorruptSaysHowToRecover(t *testing.T) {
	_, data, prev, _ := journalWith(t, 3)
	offs := frameOffsets(t, data)
	mid := offs[len(offs)-2] // the second to last change: one change follows it
	flip := func(off int) []byte {
		d := []byte(string(data))
		d[off] ^= 0x01
		return d
	}
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"change damaged", flip(mid + frameHeaderLen + 5),
			fmt.Sprintf("before offset %d, is intact: to serve it, keep a copy of the file and truncate it to %d bytes", mid, mid)},
		{"checkpoint damaged", flip(offs[0] + frameHeaderLen + 3), "restore the data dir from a backup, or move the file aside"},
		{"empty file", nil, "move the file aside to start with an empty store"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, journalName)
			if err := os.WriteFile(path, tt.data, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := OpenFile(dir, FileOptions{})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("OpenFile = %v\nwant ErrCorrupt saying %q", err, tt.want)
			}
		})
	}

	// Following the advice for the damaged change serves every change
	// before it, exactly.
	dir := t.TempDir()
	path := filepath.Join(dir, journalName)
	if err := os.WriteFile(path, flip(mid+frameHeaderLen+5), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, int64(mid)); err != nil {
		t.Fatal(err)
	}
	s := openTest(t, dir, FileOptions{})
	got := dumpStore(t, s)
	// prev is the state before the last change; the damaged change is the
	// one before that, so undo it from prev: the "last" key lost a version.
	want := prev
	if got.State.Revision != want.State.Revision-1 {
		t.Fatalf("after truncating at offset %d the store is at revision %d, want %d", mid, got.State.Revision, want.State.Revision-1)
	}
	h := want.History["last"]
	if !reflect.DeepEqual(got.History["last"], h[1:]) {
		t.Errorf("history of \"last\" after the truncation = %+v\nwant %+v", got.History["last"], h[1:])
	}
}

// TestRemovedJournalIsWrittenBack removes the data dir under an open store,
// as a cleaner of /tmp or a mistaken rm -rf does: the writes that follow,
// and the ones before, must survive a restart, which they did not when
// the store went on appending to the deleted file.
func TestRemovedJournalIsWrittenBack(t *testing.T) {
	tests := []struct {
		name   string
		remove func(dir string) error
		write  bool // write after the removal (else only Close)
	}{
		{"dir removed, then a write", os.RemoveAll, true},
		{"journal removed, then a write", func(dir string) error { return os.Remove(filepath.Join(dir, journalName)) }, true},
		{"dir removed, then close", os.RemoveAll, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			dir := filepath.Join(t.TempDir(), "data")
			s := openTest(t, dir, FileOptions{HistoryLimit: 5})
			writeMix(t, s, 30)
			if err := tt.remove(dir); err != nil {
				t.Fatal(err)
			}
			if tt.write {
				if _, err := s.Put(ctx, "after", raw(`{"x":1}`), 0, Meta{By: "t"}); err != nil {
					t.Fatalf("Put after the removal = %v", err)
				}
				// A second store on the recreated dir must still be kept out.
				if _, err := OpenFile(dir, FileOptions{}); !errors.Is(err, ErrLocked) {
					t.Fatalf("a second OpenFile after the write-back = %v, want ErrLocked", err)
				}
			}
			want := dumpStore(t, s)
			if err := s.Close(); err != nil {
				t.Fatalf("Close() = %v", err)
			}
			got := dumpStore(t, openTest(t, dir, FileOptions{HistoryLimit: 5}))
			if !reflect.DeepEqual(got, want) {
				t.Errorf("after the removal and a restart the store holds revision %d with %d rules, want revision %d with %d rules",
					got.State.Revision, len(got.State.Rules), want.State.Revision, len(want.State.Rules))
			}
		})
	}
}

// TestReplacedJournalIsNotOverwritten puts another file where the journal
// was: the store must not overwrite it (an operator may have restored a
// backup there) and refuses writes, saying so, until it is gone again.
func TestReplacedJournalIsNotOverwritten(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := openTest(t, dir, FileOptions{})
	writeMix(t, s, 10)
	want := dumpStore(t, s)
	path := filepath.Join(dir, journalName)
	other := []byte("an operator's file\n")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, other, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := s.Put(ctx, "x", raw(`{}`), AnyVersion, Meta{})
	if err == nil || !strings.Contains(err.Error(), "was replaced by another file") || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("Put over a replaced journal = %v, want a refusal naming the replacement", err)
	}
	if b, _ := os.ReadFile(path); string(b) != string(other) {
		t.Fatalf("the replacing file was overwritten: %q", b)
	}
	if got := dumpStore(t, s); !reflect.DeepEqual(got, want) {
		t.Fatal("a refused write changed the state")
	}
	// Removed again, the store writes its own state back.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "x", raw(`{}`), AnyVersion, Meta{}); err != nil {
		t.Fatalf("Put once the replacement is gone = %v", err)
	}
	want = dumpStore(t, s)
	s.Close()
	if got := dumpStore(t, openTest(t, dir, FileOptions{})); !reflect.DeepEqual(got, want) {
		t.Error("reopened state differs")
	}
}
