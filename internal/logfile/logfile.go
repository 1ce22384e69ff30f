// Package logfile is a log destination that can be reopened and switched
// while it is written to: standard output, standard error or a file. It
// serves the access log, which must survive logrotate: the rotator renames
// the file away and sends SIGUSR1 (nginx's convention), and Reopen then
// opens a new file under the configured name, so that nothing is written to
// the renamed file afterwards and nothing is lost in between (lines written
// before the reopen land in the renamed file).
package logfile

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
)

// Names of the standard streams in a path.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// Options are the standard streams the names Stdout and Stderr stand for
// (nil means the process's own), and the logger that says when writes
// start failing and when they succeed again (nil: slog.Default()).
type Options struct {
	Stdout, Stderr io.Writer
	Logger         *slog.Logger
}

// Writer writes to the destination named by its path. It is safe for
// concurrent use: a Write never interleaves with another Write, a Reopen
// or a SetPath, so a line written whole lands whole in one file.
type Writer struct {
	opts Options
	// swapMu serializes Reopen, SetPath and Close: Reopen and SetPath open
	// outside mu, and must not open (create) a file once Close has run.
	swapMu sync.Mutex

	mu   sync.Mutex
	path string
	w    io.Writer // the destination
	f    *os.File  // the file behind w, nil for a standard stream
	// failed counts the writes that failed since the last one that
	// succeeded: the first failure is logged, and so is the next success.
	failed uint64
}

// Open returns a Writer for path: "stdout", "stderr" or a file, which is
// created if needed (mode 0644) and appended to.
func Open(path string, opts Options) (*Writer, error) {
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	w := &Writer{opts: opts}
	dst, f, err := w.open(path)
	if err != nil {
		return nil, err
	}
	w.path, w.w, w.f = path, dst, f
	return w, nil
}

func (w *Writer) open(path string) (io.Writer, *os.File, error) {
	switch path {
	case Stdout:
		return w.opts.Stdout, nil, nil
	case Stderr:
		return w.opts.Stderr, nil, nil
	case "":
		return nil, nil, errors.New("open log: empty path; want stdout, stderr or a file")
	}
	// O_APPEND: several processes (an old and a new gateway during a
	// handover) may write to the same file without overwriting each other.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open log %s: %w", path, err)
	}
	return f, f, nil
}

// Write writes p to the current destination. A failed write (a full
// disk, a pipe whose reader is gone) returns its error, and is logged if
// the write before it succeeded; the first write that succeeds after
// failures is logged too, so that a destination failing for hours makes
// two log lines, not one per write.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.w == nil {
		w.mu.Unlock()
		return 0, os.ErrClosed
	}
	n, err := w.w.Write(p)
	path, failed := w.path, w.failed
	if err != nil {
		w.failed++
	} else {
		w.failed = 0
	}
	w.mu.Unlock()
	switch {
	case err != nil && failed == 0:
		w.opts.Logger.Error("log write failed; its lines are dropped until writes succeed again", "path", path, "err", err)
	case err == nil && failed > 0:
		w.opts.Logger.Info("log writes succeed again", "path", path, "failed_writes", failed)
	}
	return n, err
}

// Path returns the destination's name.
func (w *Writer) Path() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.path
}

// Reopen opens the file under its name again and closes the old one, for
// log rotation. A standard stream needs no reopening. If the file cannot be
// opened, writes keep going to the old one and the error says why.
func (w *Writer) Reopen() error {
	w.swapMu.Lock()
	defer w.swapMu.Unlock()
	w.mu.Lock()
	path := w.path
	w.mu.Unlock()
	if path == Stdout || path == Stderr {
		return nil
	}
	return w.swapLocked(path, true)
}

// SetPath switches to another destination: the new one is opened first,
// so a destination that cannot be opened leaves the writer as it was.
func (w *Writer) SetPath(path string) error {
	w.swapMu.Lock()
	defer w.swapMu.Unlock()
	return w.swapLocked(path, false)
}

// swapLocked opens path and makes it the destination; swapMu is held. A
// closed Writer opens nothing: a Reopen (SIGUSR1) that races the Close of
// a log being turned off does not create the file again.
func (w *Writer) swapLocked(path string, reopen bool) error {
	w.mu.Lock()
	same, closed := path == w.path, w.w == nil
	w.mu.Unlock()
	if closed {
		return os.ErrClosed
	}
	if same && !reopen {
		return nil
	}
	// Open outside the lock: a slow file system must not hold up writes.
	dst, f, err := w.open(path)
	if err != nil {
		return err
	}
	w.mu.Lock()
	old := w.f
	w.path, w.w, w.f = path, dst, f
	w.mu.Unlock()
	if old != nil && old != f {
		if err := old.Close(); err != nil {
			return fmt.Errorf("close the previous log file: %w", err)
		}
	}
	return nil
}

// Close closes the file, if any; later writes fail with os.ErrClosed, and
// later Reopen and SetPath calls too, without opening anything.
func (w *Writer) Close() error {
	w.swapMu.Lock()
	defer w.swapMu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	f := w.f
	w.w, w.f = nil, nil
	if f != nil {
		return f.Close()
	}
	return nil
}
