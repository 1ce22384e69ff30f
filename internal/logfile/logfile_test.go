package logfile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestStandardStreams(t *testing.T) {
	var out, errs bytes.Buffer
	tests := []struct {
		name, path string
		want       *bytes.Buffer
	}{
		{"stdout", Stdout, &out},
		{"stderr", Stderr, &errs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := Open(tt.path, Options{Stdout: &out, Stderr: &errs})
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(w, "line to", tt.name)
			if err := w.Reopen(); err != nil {
				t.Errorf("Reopen of %s = %v", tt.path, err)
			}
			if got := tt.want.String(); got != "line to "+tt.name+"\n" {
				t.Errorf("%s got %q", tt.name, got)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name, path, want string
	}{
		{"empty", "", "empty path"},
		{"missing directory", filepath.Join(t.TempDir(), "no", "such", "dir", "access.log"), "open log"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Open(tt.path, Options{}); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open(%q) = %v, want an error saying %q", tt.path, err, tt.want)
			}
		})
	}
}

// TestSetPath switches from stdout to a file and to another file; a path
// that cannot be opened leaves the writer where it was.
func TestSetPath(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	w, err := Open(Stdout, Options{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fmt.Fprintln(w, "one")
	a, b := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	if err := w.SetPath(a); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(w, "two")
	if err := w.SetPath(filepath.Join(dir, "missing", "c.log")); err == nil {
		t.Fatal("SetPath to a missing directory succeeded")
	}
	fmt.Fprintln(w, "three")
	if err := w.SetPath(b); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(w, "four")
	if w.Path() != b {
		t.Errorf("Path() = %q, want %q", w.Path(), b)
	}
	for path, want := range map[string]string{"stdout": "one\n", a: "two\nthree\n", b: "four\n"} {
		got := out.String()
		if path != "stdout" {
			data, _ := os.ReadFile(path)
			got = string(data)
		}
		if got != want {
			t.Errorf("%s holds %q, want %q", path, got, want)
		}
	}
	w.Close()
	if _, err := w.Write([]byte("x\n")); err == nil {
		t.Error("Write after Close succeeded")
	}
}

// TestRotateUnderLoad renames the file away and reopens it, again and
// again, while writers keep writing lines: every line lands whole in one
// of the files, and none is lost.
func TestRotateUnderLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	w, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const writers, lines, rotations = 4, 2000, 20
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			for n := range lines {
				if _, err := fmt.Fprintf(w, "{\"writer\":%d,\"n\":%d}\n", i, n); err != nil {
					t.Errorf("write: %v", err)
					return
				}
			}
		})
	}
	for r := range rotations {
		if err := os.Rename(path, fmt.Sprintf("%s.%d", path, r)); err != nil {
			t.Fatal(err)
		}
		if err := w.Reopen(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(path + "*")
	if len(files) != rotations+1 {
		t.Errorf("%d files, want %d", len(files), rotations+1)
	}
	seen := map[string]bool{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			l := sc.Text()
			if !strings.HasPrefix(l, "{") || !strings.HasSuffix(l, "}") || seen[l] {
				t.Fatalf("%s: torn or repeated line %q", f, l)
			}
			seen[l] = true
		}
		fh.Close()
	}
	if len(seen) != writers*lines {
		t.Errorf("%d lines across the files, want %d", len(seen), writers*lines)
	}
}

// TestClosedOpensNothing: once closed (the access log turned off by a
// reload), a Writer opens nothing, so a Reopen for a SIGUSR1 that raced the
// Close does not create the file logrotate just deleted; Reopen and
// SetPath say os.ErrClosed.
func TestClosedOpensNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	w, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.log")
	for name, call := range map[string]func() error{"Reopen": w.Reopen, "SetPath": func() error { return w.SetPath(other) }} {
		if err := call(); !errors.Is(err, os.ErrClosed) {
			t.Errorf("%s after Close = %v, want os.ErrClosed", name, err)
		}
	}
	for _, p := range []string{path, other} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after Reopen and SetPath on a closed Writer (stat: %v)", p, err)
		}
	}
	if _, err := w.Write([]byte("x\n")); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Write after Close = %v, want os.ErrClosed", err)
	}
}

// flakyWriter fails its writes while down is set.
type flakyWriter struct {
	down bool
	got  bytes.Buffer
}

func (f *flakyWriter) Write(p []byte) (int, error) {
	if f.down {
		return 0, errors.New("no space left on device")
	}
	return f.got.Write(p)
}

// TestWriteFailuresLogged: a destination whose writes fail (a full disk, a
// pipe whose reader died) returns the error of each write, and the log
// says so once when the failures start, with the path and the error, and
// once when writes succeed again, with how many failed: never once per
// write.
func TestWriteFailuresLogged(t *testing.T) {
	var logged bytes.Buffer
	dst := &flakyWriter{}
	w, err := Open(Stdout, Options{Stdout: dst, Logger: slog.New(slog.NewJSONHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	write := func(line string) error {
		_, err := w.Write([]byte(line + "\n"))
		return err
	}
	if err := write("one"); err != nil {
		t.Fatal(err)
	}
	dst.down = true
	for i := range 5 {
		if err := write(fmt.Sprintf("lost %d", i)); err == nil {
			t.Errorf("write %d to a failing destination returned no error", i)
		}
	}
	dst.down = false
	for _, l := range []string{"two", "three"} {
		if err := write(l); err != nil {
			t.Fatal(err)
		}
	}
	if got := dst.got.String(); got != "one\ntwo\nthree\n" {
		t.Errorf("destination holds %q", got)
	}
	type record struct {
		Level, Msg, Path, Err string
		FailedWrites          int `json:"failed_writes"`
	}
	var recs []record
	for _, l := range strings.Split(strings.TrimSpace(logged.String()), "\n") {
		if l == "" {
			continue
		}
		var r record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 2 {
		t.Fatalf("%d log records, want 2 (failures started, writes succeed again):\n%s", len(recs), logged.String())
	}
	if r := recs[0]; r.Level != "ERROR" || r.Path != Stdout || !strings.Contains(r.Err, "no space left") || !strings.Contains(r.Msg, "dropped") {
		t.Errorf("first record %+v, want an error naming the path, the error and the dropped lines", r)
	}
	if r := recs[1]; r.Level != "INFO" || r.Path != Stdout || r.FailedWrites != 5 || !strings.Contains(r.Msg, "succeed again") {
		t.Errorf("second record %+v, want writes succeeding again after 5 failed", r)
	}
}
