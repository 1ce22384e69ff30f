package store

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

// TestFullDiskWrite makes the journal's disk "full" with a file-size limit
// (RLIMIT_FSIZE; Go ignores SIGXFSZ, so the write fails with EFBIG as it
// would with ENOSPC). The failed write must name the journal by its real
// name and the offset, never the .tmp name the file was created under
// (which no longer exists), say that nothing was changed, and leave the
// store writable and the state on disk as acknowledged.
func TestFullDiskWrite(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := openTest(t, dir, FileOptions{})
	writeMix(t, s, 12)
	want := dumpStore(t, s)
	path := filepath.Join(dir, journalName)
	size := s.j.size

	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = uint64(size) + 64
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Skipf("cannot set RLIMIT_FSIZE: %v", err)
	}
	_, err := s.Put(ctx, "big", whitelistRule(100), AnyVersion, Meta{By: "t"})
	if rerr := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil {
		t.Fatal("Put past the file-size limit succeeded")
	}
	msg := err.Error()
	for _, w := range []string{
		fmt.Sprintf("write %s at offset %d", path, size),
		"nothing was changed",
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("Put error = %q\nwant it to say %q", msg, w)
		}
	}
	if strings.Contains(msg, tmpSuffix) {
		t.Errorf("Put error = %q\nnames the checkpoint file %s, which does not exist", msg, path+tmpSuffix)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != size {
		t.Fatalf("journal after the failed write: %v, %v bytes; want %d bytes", err, fi.Size(), size)
	}
	if got := dumpStore(t, s); !reflect.DeepEqual(got, want) {
		t.Fatal("a failed write changed the state")
	}
	// The disk has room again: writes go on.
	if _, err := s.Put(ctx, "big", whitelistRule(100), AnyVersion, Meta{By: "t"}); err != nil {
		t.Fatalf("Put once there is room = %v", err)
	}
	want = dumpStore(t, s)
	s.Close()
	if got := dumpStore(t, openTest(t, dir, FileOptions{})); !reflect.DeepEqual(got, want) {
		t.Error("reopened state differs")
	}
}
