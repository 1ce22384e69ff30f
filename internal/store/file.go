package store

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// File names inside the data directory.
const (
	journalName = "store.journal"
	lockName    = "store.lock"
	tmpSuffix   = ".tmp"   // a checkpoint being written; never valid
	tornPrefix  = ".torn-" // a saved torn tail, kept for inspection
)

const (
	defaultHistoryLimit = 100
	defaultCompactBytes = 4 << 20
)

// FileOptions configures OpenFile. The zero value is usable.
type FileOptions struct {
	// HistoryLimit is how many changes are kept per key (and for the
	// global flag); older ones are pruned. Default 100, at most
	// MaxHistoryLimit.
	HistoryLimit int
	// CompactBytes is how far the journal must grow past its last
	// checkpoint before it is compacted. The journal is also never
	// compacted before it has doubled, which keeps the cost of rewriting
	// a large history proportional to the bytes written. Default 4 MiB.
	CompactBytes int64
	// Now is the clock that stamps changes. Default time.Now.
	Now func() time.Time
	// Logger receives warnings about torn tails and failed compactions.
	// Default: discard.
	Logger *slog.Logger
}

// FileStore is the embedded Store: a journal in a data directory. It is safe
// for concurrent use. Readers never wait for the disk: writers are
// serialized by one lock and only take the state lock, briefly, after their
// change is durable.
type FileStore struct {
	dir          string
	path         string
	now          func() time.Time
	log          *slog.Logger
	compactBytes int64
	lock         *os.File
	changes      chan int64

	// wmu serializes writers. It guards the journal and, together with mu,
	// every mutation of st and closed; holding wmu alone is enough to read
	// st, because only writers change it.
	wmu sync.Mutex
	j   journal

	mu     sync.RWMutex
	st     *state
	closed bool
}

// journal is the open journal file. It is guarded by FileStore.wmu.
type journal struct {
	f           *os.File
	size        int64 // bytes acknowledged so far; appends go here
	base        int64 // bytes of the last checkpoint
	nextCompact int64 // do not try to compact again before this size
	// broken is set when the file can no longer be trusted to match the
	// acknowledged state; all later writes fail until the store is
	// reopened, which re-reads what is really on disk.
	broken error
}

var _ Store = (*FileStore)(nil)

// OpenFile opens the file store in dir, creating the directory if needed. It
// takes an exclusive lock on the directory; a second opener, in this or
// another process, fails with ErrLocked until Close. A journal that cannot
// be read back fails with ErrCorrupt, naming the file and offset.
func OpenFile(dir string, opts FileOptions) (*FileStore, error) {
	switch {
	case opts.HistoryLimit < 0:
		return nil, fmt.Errorf("open store %s: HistoryLimit %d is negative: %w", dir, opts.HistoryLimit, ErrInvalid)
	case opts.HistoryLimit > MaxHistoryLimit:
		return nil, fmt.Errorf("open store %s: HistoryLimit %d is above the maximum %d: %w", dir, opts.HistoryLimit, MaxHistoryLimit, ErrInvalid)
	case opts.HistoryLimit == 0:
		opts.HistoryLimit = defaultHistoryLimit
	}
	switch {
	case opts.CompactBytes < 0:
		return nil, fmt.Errorf("open store %s: CompactBytes %d is negative: %w", dir, opts.CompactBytes, ErrInvalid)
	case opts.CompactBytes == 0:
		opts.CompactBytes = defaultCompactBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	used := dirUsed(dir)
	if err := ensureDir(dir); err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	s := &FileStore{
		dir:          dir,
		path:         filepath.Join(dir, journalName),
		now:          opts.Now,
		log:          opts.Logger.With("component", "store", "dir", dir),
		compactBytes: opts.CompactBytes,
		lock:         lock,
		changes:      make(chan int64, 1),
	}
	if err := s.load(opts.HistoryLimit, used); err != nil {
		lock.Close()
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	return s, nil
}

// ensureDir creates dir, and any missing parents, if needed, and fsyncs
// the parent of each directory it created so that the new entries survive a
// crash.
func ensureDir(dir string) error {
	dir = filepath.Clean(dir)
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("%s is not a directory", d)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, d := range missing {
		if err := SyncDir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}

// dirUsed reports whether dir holds what an earlier run of graygate leaves
// there: the store's lock file, an unfinished checkpoint, or the experiment
// data (usedMarks). Other files (a config file kept beside the data, with
// data_dir: .) say nothing about the store, so they do not count.
func dirUsed(dir string) bool {
	for _, name := range usedMarks {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// usedMarks are the names dirUsed looks for.
var usedMarks = []string{lockName, journalName + tmpSuffix, "experiments"}

// load reads the journal, or creates an empty one, and opens it for
// appending. used says the directory held something before it was opened:
// a journal missing from it was most likely deleted, or the data dir is
// not the one meant, and the empty store that starts is worth a warning.
func (s *FileStore) load(limit int, used bool) error {
	tmp := s.path + tmpSuffix
	if err := os.Remove(tmp); err == nil {
		s.log.Warn("removed an unfinished checkpoint", "file", tmp)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove unfinished checkpoint: %w", err)
	}
	data, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		st := newState(limit)
		f, size, err := s.writeCheckpoint(st)
		if err != nil {
			if f != nil {
				f.Close()
			}
			return fmt.Errorf("create %s: %w", s.path, err)
		}
		s.st = st
		s.j = journal{f: f, size: size, base: size}
		if used {
			s.log.Warn("the data directory was used before but holds no journal; starting with an empty store (rules written through the API and all history are absent): if the journal was deleted or this is not the data dir meant, stop and restore it",
				"file", s.path)
		} else {
			s.log.Info("created store", "file", s.path)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("read journal: %w", err)
	}
	st, res, err := parseJournal(data, limit)
	if err != nil {
		return fmt.Errorf("read %s: %w", s.path, err)
	}
	f, err := os.OpenFile(s.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open journal: %w", err)
	}
	if res.torn > 0 {
		if err := s.dropTornTail(f, data[res.size:], res); err != nil {
			f.Close()
			return err
		}
	}
	s.st = st
	s.j = journal{f: f, size: res.size, base: res.base}
	s.log.Info("opened store", "file", s.path, "revision", st.revision,
		"journal_bytes", res.size, "journal_records", res.records)
	return nil
}

// dropTornTail truncates the unacknowledged tail an interrupted append left
// behind, so that the next append does not land after garbage. The bytes are
// first copied aside, because a tail that looks torn could also be damage to
// the last acknowledged frame, and an operator should be able to tell.
func (s *FileStore) dropTornTail(f *os.File, tail []byte, res parsed) error {
	saved := "(not saved)"
	if tf, err := os.CreateTemp(s.dir, journalName+tornPrefix+"*"); err != nil {
		s.log.Error("could not save torn tail", "error", err)
	} else {
		_, werr := tf.Write(tail)
		if err := errors.Join(werr, tf.Sync(), tf.Close()); err != nil {
			s.log.Error("could not save torn tail", "file", tf.Name(), "error", err)
		} else {
			saved = tf.Name()
		}
	}
	s.log.Warn("dropped the torn tail of an interrupted write",
		"file", s.path, "offset", res.size, "bytes", res.torn, "reason", res.tornWhy, "saved_to", saved)
	if err := f.Truncate(res.size); err != nil {
		return fmt.Errorf("truncate torn tail of %s at offset %d: %w", s.path, res.size, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("truncate torn tail of %s: fsync: %w", s.path, err)
	}
	return nil
}

// writeCheckpoint writes st as a new journal: to a temporary file, fsynced,
// renamed over the journal, and the directory fsynced. It returns the new
// file, open for appending, and its size. If the returned file is non-nil
// the rename has happened, even when err reports that it may not be durable.
func (s *FileStore) writeCheckpoint(st *state) (*os.File, int64, error) {
	tmp := s.path + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("create checkpoint: %w", err)
	}
	fail := func(err error) (*os.File, int64, error) {
		f.Close()
		os.Remove(tmp)
		return nil, 0, err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	size, err := writeBase(bw, st)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return fail(fmt.Errorf("write checkpoint %s: %w", tmp, err))
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("fsync checkpoint %s: %w", tmp, err))
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return fail(fmt.Errorf("rename checkpoint into place: %w", err))
	}
	if err := SyncDir(s.dir); err != nil {
		return f, size, fmt.Errorf("fsync directory after renaming the checkpoint: %w", err)
	}
	return f, size, nil
}

// append writes one frame at the end of the journal and fsyncs it. On
// failure it cuts the file back to the last acknowledged frame, so that a
// half-written frame never sits in front of a later one.
//
// Its errors name path and the offset, never the name the file was
// created under: the journal is always created as a checkpoint file and
// renamed, and *os.File errors would name that .tmp file, which no longer
// exists. They also say whether anything changed, since the operator
// reading a failed write (a full disk) needs to know.
func (j *journal) append(path string, frame []byte) error {
	if j.broken != nil {
		return fmt.Errorf("the store refuses writes after an earlier failure until graygate restarts and reopens it: %w", j.broken)
	}
	_, err := j.f.WriteAt(frame, j.size)
	if err == nil {
		if err = j.f.Sync(); err != nil {
			err = fmt.Errorf("fsync %s: %w", path, bare(err))
		}
	} else {
		err = fmt.Errorf("write %s at offset %d: %w", path, j.size, bare(err))
	}
	if err != nil {
		if terr := j.f.Truncate(j.size); terr != nil {
			j.broken = fmt.Errorf("cut %s back to %d bytes: %w", path, j.size, bare(terr))
		} else if serr := j.f.Sync(); serr != nil {
			j.broken = fmt.Errorf("cut %s back to %d bytes: fsync: %w", path, j.size, bare(serr))
		}
		if j.broken != nil {
			return fmt.Errorf("%w; %v, so the change may or may not be found after a restart, and later writes are refused until then", err, j.broken)
		}
		return fmt.Errorf("%w; the journal was cut back to its last acknowledged change, so nothing was changed", err)
	}
	j.size += int64(len(frame))
	return nil
}

// bare returns the error inside a *fs.PathError, without the file name;
// see journal.append.
func bare(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// commit makes r durable, applies it and tells the watcher. The caller holds
// wmu and has checked r's preconditions.
func (s *FileStore) commit(r *record) error {
	if err := s.st.checkNext(r); err != nil {
		return fmt.Errorf("internal error: refusing an inconsistent change: %w", err)
	}
	frame, err := encodeFrame(frameChange, r)
	if err != nil {
		return err
	}
	if err := s.checkLinked(); err != nil {
		s.log.Error("a write to the store was refused", "key", r.Key, "op", r.Op, "error", err)
		return err
	}
	if err := s.j.append(s.path, frame); err != nil {
		s.log.Error("a write to the store failed", "key", r.Key, "op", r.Op, "error", err)
		return err
	}
	s.mu.Lock()
	s.st.apply(r)
	s.mu.Unlock()
	Notify(s.changes, r.Revision)
	s.maybeCompact()
	return nil
}

// checkLinked makes sure that the journal this store appends to is still
// the file at its path, and writes it back when it is gone. The caller
// holds wmu.
//
// A data dir removed under a running gateway (rm -rf, a cleaner of /tmp)
// leaves the store appending to a deleted file: every write would be
// acknowledged, and lost at the next start, which finds no journal and
// starts empty. So before every write, and on Close, the store compares
// its open file with the path. When the journal (or the whole directory)
// is gone, the store writes its state, history included, back as a new
// checkpoint, takes the lock again, and logs it; the write then goes on.
// When another file has taken the journal's place, the store does not
// overwrite it (an operator may have put a backup there) and refuses the
// write, saying so, until the file is removed again or graygate restarts
// and reads it. A directory removed between this check and the write's
// fsync still loses that write; the check costs two stat calls, nothing
// next to the fsync.
func (s *FileStore) checkLinked() error {
	if s.j.broken != nil {
		return nil // append refuses the write and says why
	}
	open, err := s.j.f.Stat()
	if err != nil {
		return nil // the file itself fails: append finds out and says so
	}
	onDisk, err := os.Stat(s.path)
	switch {
	case err == nil && os.SameFile(open, onDisk):
		return nil
	case err == nil:
		return fmt.Errorf("%s was replaced by another file while graygate was running, so nothing was changed: restart graygate to serve the rules that file holds, or remove it to have the store write back the state it serves", s.path)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("stat %s: %w", s.path, err)
	}
	gone := fmt.Sprintf("%s was removed while graygate was running", s.path)
	if err := ensureDir(s.dir); err != nil {
		return fmt.Errorf("%s, and writing it back failed, so nothing was changed: recreate %s: %w", gone, s.dir, err)
	}
	lock := s.lock
	if held, err := lock.Stat(); err != nil || !sameFile(held, filepath.Join(s.dir, lockName)) {
		if lock, err = lockDir(s.dir); err != nil {
			return fmt.Errorf("%s, and writing it back failed, so nothing was changed: %w", gone, err)
		}
	}
	f, size, err := s.writeCheckpoint(s.st)
	if f == nil {
		if lock != s.lock {
			lock.Close()
		}
		return fmt.Errorf("%s, and writing it back failed, so nothing was changed: %w", gone, err)
	}
	if lock != s.lock {
		s.lock.Close()
		s.lock = lock
	}
	s.j.f.Close()
	s.j.f, s.j.size, s.j.base, s.j.nextCompact = f, size, size, 0
	if err != nil {
		s.j.broken = fmt.Errorf("write back the removed journal: %w", err)
		return fmt.Errorf("%s, and writing it back may not be durable, so nothing was changed: %w", gone, err)
	}
	s.log.Error("the journal was removed while graygate was running (was the data dir deleted?); wrote the store's state, with its history, back from memory",
		"file", s.path, "revision", s.st.revision)
	return nil
}

// sameFile reports whether path names the file fi describes.
func sameFile(fi os.FileInfo, path string) bool {
	pi, err := os.Stat(path)
	return err == nil && os.SameFile(fi, pi)
}

// maybeCompact rewrites the journal as a checkpoint once it has grown by
// CompactBytes and at least doubled. A failed compaction leaves the old
// journal in use and is retried after another CompactBytes.
func (s *FileStore) maybeCompact() {
	j := &s.j
	grown := j.size - j.base
	if grown < s.compactBytes || grown < j.base || j.size < j.nextCompact {
		return
	}
	before := j.size
	f, size, err := s.writeCheckpoint(s.st)
	if f == nil {
		j.nextCompact = j.size + s.compactBytes
		s.log.Error("journal compaction failed; still appending to the old journal", "error", err)
		return
	}
	// The rename happened: the path names the new file now, so appends
	// must go there even if the rename may not be durable.
	j.f.Close()
	j.f, j.size, j.base = f, size, size
	if err != nil {
		j.broken = fmt.Errorf("compact journal: %w", err)
		s.log.Error("journal compaction may not be durable; refusing writes until reopened", "error", err)
		return
	}
	s.log.Debug("compacted journal", "bytes_before", before, "bytes_after", size, "revision", s.st.revision)
}

// Kind returns "file".
func (s *FileStore) Kind() string { return "file" }

// Changes returns the notification channel; see Store.
func (s *FileStore) Changes() <-chan int64 { return s.changes }

// Load returns a copy of the whole rule set.
func (s *FileStore) Load(ctx context.Context) (State, error) {
	if err := ctx.Err(); err != nil {
		return State{}, fmt.Errorf("load rules: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return State{}, fmt.Errorf("load rules: %w", ErrClosed)
	}
	return s.st.snapshot(), nil
}

// Get returns a copy of the current version of key.
func (s *FileStore) Get(ctx context.Context, key string) (Entry, error) {
	if err := ctx.Err(); err != nil {
		return Entry{}, fmt.Errorf("get rule %q: %w", key, err)
	}
	if !ValidKey(key) {
		return Entry{}, fmt.Errorf("get rule %q: key must match %s: %w", key, KeyPattern, ErrInvalid)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return Entry{}, fmt.Errorf("get rule %q: %w", key, ErrClosed)
	}
	ks := s.st.rules[key]
	if ks == nil || ks.rule == nil {
		return Entry{}, NotFound(key)
	}
	return cloneEntry(ks.entry), nil
}

// History returns a copy of the retained changes of key, newest first.
func (s *FileStore) History(ctx context.Context, key string) ([]Change, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("history of %q: %w", key, err)
	}
	if !ValidKey(key) && key != GlobalKey {
		return nil, fmt.Errorf("history of %q: key must match %s or be %q: %w", key, KeyPattern, GlobalKey, ErrInvalid)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, fmt.Errorf("history of %q: %w", key, ErrClosed)
	}
	ks := s.st.lookup(key)
	if ks == nil || len(ks.history) == 0 {
		return nil, fmt.Errorf("history of %q: %w", key, ErrNotFound)
	}
	return historyOf(ks), nil
}

// Put writes rule under key; see Store. The rule must be a JSON object; it is
// stored compacted.
func (s *FileStore) Put(ctx context.Context, key string, rule json.RawMessage, ifVersion int64, m Meta) (Entry, error) {
	fail := func(err error) (Entry, error) { return Entry{}, fmt.Errorf("put rule %q: %w", key, err) }
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if !ValidKey(key) {
		return fail(fmt.Errorf("key must match %s: %w", KeyPattern, ErrInvalid))
	}
	if ifVersion < AnyVersion {
		return fail(fmt.Errorf("ifVersion %d is below AnyVersion: %w", ifVersion, ErrInvalid))
	}
	revert := false
	switch m.Op {
	case "", OpCreate, OpUpdate:
	case OpRevert:
		revert = true
	default:
		return fail(fmt.Errorf("op %q is not a put operation: %w", m.Op, ErrInvalid))
	}
	body, err := NormalizeRule(rule, maxRuleBytes)
	if err != nil {
		return fail(err)
	}

	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writable(ctx); err != nil {
		return fail(err)
	}
	ks := s.st.rules[key]
	if ks == nil {
		ks = &keyState{}
	}
	if err := CheckVersion(key, ks.version, ks.rule != nil, ifVersion, true); err != nil {
		return Entry{}, err
	}
	r := s.newRecord(key, ks, m)
	r.Rule = body
	switch {
	case revert:
		r.Op = OpRevert
	case ks.rule != nil:
		r.Op = OpUpdate
	default:
		r.Op = OpCreate
	}
	if ks.rule != nil {
		r.RolledBack = ks.rolledBack
	}
	if err := s.commit(r); err != nil {
		return fail(err)
	}
	return cloneEntry(s.st.rules[key].entry), nil
}

// Delete removes key; see Store.
func (s *FileStore) Delete(ctx context.Context, key string, ifVersion int64, m Meta) (Change, error) {
	fail := func(err error) (Change, error) { return Change{}, fmt.Errorf("delete rule %q: %w", key, err) }
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if !ValidKey(key) {
		return fail(fmt.Errorf("key must match %s: %w", KeyPattern, ErrInvalid))
	}
	if ifVersion < AnyVersion {
		return fail(fmt.Errorf("ifVersion %d is below AnyVersion: %w", ifVersion, ErrInvalid))
	}
	if m.Op != "" && m.Op != OpDelete {
		return fail(fmt.Errorf("op %q is not %q: %w", m.Op, OpDelete, ErrInvalid))
	}

	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writable(ctx); err != nil {
		return fail(err)
	}
	ks := s.st.rules[key]
	if ks == nil || ks.rule == nil {
		return Change{}, NotFound(key)
	}
	if err := CheckVersion(key, ks.version, ks.rule != nil, ifVersion, false); err != nil {
		return Change{}, err
	}
	r := s.newRecord(key, ks, m)
	r.Op = OpDelete
	if err := s.commit(r); err != nil {
		return fail(err)
	}
	c := ks.history[len(ks.history)-1]
	c.Before = cloneRaw(c.Before)
	return c, nil
}

// SetRollback sets the global (key "") or a rule's rollback flag; see Store.
func (s *FileStore) SetRollback(ctx context.Context, key string, on bool, ifVersion int64, m Meta) (State, error) {
	op := OpResume
	if on {
		op = OpRollback
	}
	what := fmt.Sprintf("%s rule %q", op, key)
	hkey := key
	if key == "" {
		what = op + " globally"
		hkey = GlobalKey
	}
	fail := func(err error) (State, error) { return State{}, fmt.Errorf("%s: %w", what, err) }
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if key != "" && !ValidKey(key) {
		return fail(fmt.Errorf("key must match %s: %w", KeyPattern, ErrInvalid))
	}
	if m.Op != "" && m.Op != op {
		return fail(fmt.Errorf("op %q is not %q: %w", m.Op, op, ErrInvalid))
	}
	if err := CheckRollbackVersion(key, ifVersion); err != nil {
		return fail(err)
	}

	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writable(ctx); err != nil {
		return fail(err)
	}
	ks := s.st.lookup(hkey)
	if key != "" && (ks == nil || ks.rule == nil) {
		return State{}, NotFound(key)
	}
	if key != "" {
		if err := CheckVersion(key, ks.version, true, ifVersion, false); err != nil {
			return State{}, err // it names the rule
		}
	}
	if ks.rolledBack == on {
		return s.st.snapshot(), nil
	}
	r := s.newRecord(hkey, ks, m)
	r.Op = op
	r.RolledBack = on
	if err := s.commit(r); err != nil {
		return fail(err)
	}
	return s.st.snapshot(), nil
}

// Close releases the lock and closes the Changes channel. Closing twice is
// a no-op.
func (s *FileStore) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	// A journal removed since the last write is written back now, so that
	// the next start does not find the data dir empty.
	if err := s.checkLinked(); err != nil {
		s.log.Error("the journal cannot be kept on close", "error", err)
	}
	close(s.changes)
	if err := errors.Join(s.j.f.Close(), s.lock.Close()); err != nil {
		return fmt.Errorf("close store %s: %w", s.dir, err)
	}
	return nil
}

// writable reports why a write cannot start now. The caller holds wmu.
func (s *FileStore) writable(ctx context.Context) error {
	if s.closed {
		return ErrClosed
	}
	return ctx.Err()
}

// newRecord starts the record of the next change of ks. The caller holds
// wmu.
func (s *FileStore) newRecord(key string, ks *keyState, m Meta) *record {
	return &record{
		Key:      key,
		Version:  ks.version + 1,
		Revision: s.st.revision + 1,
		// UTC drops the monotonic reading and the zone, so the time reads
		// back from disk exactly as it is returned now.
		At:     s.now().UTC(),
		By:     strings.ToValidUTF8(m.By, "\uFFFD"),
		Reason: strings.ToValidUTF8(m.Reason, "\uFFFD"),
	}
}

// SyncDir fsyncs a directory, making the entries created or renamed in it
// durable. Every store that writes files atomically (temp file, fsync,
// rename) finishes with it.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return d.Close()
}
