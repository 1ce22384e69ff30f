package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/graygate/graygate/internal/rulekey"
)

// Sentinel errors. Implementations wrap them with %w and name the key and the
// versions involved, so callers test with errors.Is and log the message.
var (
	// ErrNotFound reports that the rule (or its history) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict reports that a compare-and-set precondition (ifVersion)
	// did not hold.
	ErrConflict = errors.New("conflict")
	// ErrInvalid reports a bad argument: a malformed key, a rule that is not
	// a JSON object, an unknown Meta.Op or an ifVersion below AnyVersion.
	ErrInvalid = errors.New("invalid argument")
	// ErrClosed reports a call on a store that has been closed.
	ErrClosed = errors.New("store closed")
	// ErrLocked reports that another process holds the store open.
	ErrLocked = errors.New("store locked by another process")
	// ErrCorrupt reports persisted data that cannot be read back as
	// written. The store refuses to open rather than drop data.
	ErrCorrupt = errors.New("store data corrupt")
)

// MaxHistoryLimit bounds the changes a store keeps per key (the config's
// store.history_limit). The file store holds every kept version in memory
// and History copies them all, and the admin API's history without
// ?limit, documented as the whole retained history, sends them all with
// their diffs: at 1000 that answer is never larger than the API's largest
// page (limit 1 to 1000), and a rule changed every few minutes still keeps
// days of history.
const MaxHistoryLimit = 1000

// AnyVersion as ifVersion makes Put and Delete unconditional.
const AnyVersion int64 = -1

// GlobalKey is the reserved history key under which changes of the global
// rollback flag are recorded. It can be passed to History but never to Put,
// Get or Delete; rule keys cannot start with an underscore, so it never
// collides with a rule.
const GlobalKey = "_global"

// Change operations, as found in Change.Op.
const (
	OpCreate   = "create"
	OpUpdate   = "update"
	OpDelete   = "delete"
	OpRevert   = "revert"
	OpRollback = "rollback"
	OpResume   = "resume"
)

// Entry is the current version of one rule.
type Entry struct {
	Key  string          `json:"key"`
	Rule json.RawMessage `json:"rule"`
	// Version is per rule: it starts at 1 and grows by one on every change
	// of this key (including delete, revert, rollback and resume). It is
	// never reused, not even after the rule is deleted and created again.
	Version int64 `json:"version"`
	// Revision is the global revision at which this version was written.
	Revision  int64     `json:"revision"`
	UpdatedAt time.Time `json:"updated_at"`
	UpdatedBy string    `json:"updated_by"`
	Reason    string    `json:"reason,omitempty"`
	// RolledBack is the per-rule rollback flag.
	RolledBack bool `json:"rolled_back"`
}

// Change is one history record: what one version did to one key.
type Change struct {
	Key string `json:"key"`
	// Op is one of OpCreate, OpUpdate, OpDelete, OpRevert, OpRollback and
	// OpResume. Changes of the global flag (Key == GlobalKey) are always
	// OpRollback or OpResume.
	Op       string    `json:"op"`
	Version  int64     `json:"version"`
	Revision int64     `json:"revision"`
	At       time.Time `json:"at"`
	By       string    `json:"by"`
	Reason   string    `json:"reason,omitempty"`
	// Before and After are the rule JSON around the change; nil where the
	// rule did not exist (and always nil for GlobalKey).
	Before           json.RawMessage `json:"before,omitempty"`
	After            json.RawMessage `json:"after,omitempty"`
	RolledBackBefore bool            `json:"rolled_back_before"`
	RolledBackAfter  bool            `json:"rolled_back_after"`
}

// State is the whole rule set at one global revision.
type State struct {
	// Revision is the global revision: 0 for an empty store, then one more
	// for every committed change of any kind.
	Revision int64 `json:"revision"`
	// Rules holds the existing (not deleted) rules, sorted by key.
	Rules []Entry `json:"rules"`
	// RolledBack is the global one-click rollback flag.
	RolledBack bool `json:"rolled_back"`
	// Epoch tells apart the histories a shared store has followed: it
	// starts at 0 and grows by one each time the store finds that the
	// history it applied was replaced, as when etcd is restored from a
	// backup, so that the new history's revisions may be lower. Within
	// one epoch Revision never goes back. It is this process's count: it
	// is not stored, and epochs of different processes do not compare.
	Epoch int64 `json:"-"`
}

// Meta says who makes a change and why.
type Meta struct {
	By     string
	Reason string
	// Op is optional. For Put, OpRevert marks the write as a revert; empty,
	// OpCreate and OpUpdate let the store decide between create and update.
	// For Delete and SetRollback it must be empty or name the operation the
	// store records. Anything else is ErrInvalid.
	Op string
}

// Store is a versioned store of routing rules. Rules are opaque JSON objects
// to the store.
//
// All methods are safe for concurrent use. Writes are serialized, and every
// write that returns nil is durable. Returned values never alias the store's
// internal state, so callers may modify them.
type Store interface {
	// Kind names the implementation, for logs and the admin API.
	Kind() string
	// Load returns the whole rule set at the current revision.
	Load(ctx context.Context) (State, error)
	// Get returns the current version of one rule, or ErrNotFound.
	Get(ctx context.Context, key string) (Entry, error)
	// Put writes a rule. ifVersion AnyVersion writes unconditionally, 0
	// requires that the rule does not exist, and N > 0 requires that its
	// current version is N; otherwise Put fails with ErrConflict.
	Put(ctx context.Context, key string, rule json.RawMessage, ifVersion int64, m Meta) (Entry, error)
	// Delete removes a rule and returns the recorded change. It fails with
	// ErrNotFound when the rule does not exist and with ErrConflict when
	// ifVersion is neither AnyVersion nor the current version.
	Delete(ctx context.Context, key string, ifVersion int64, m Meta) (Change, error)
	// History returns the retained changes of key, newest first. The
	// history of a deleted rule stays readable; GlobalKey returns the
	// changes of the global rollback flag. A key that never existed is
	// ErrNotFound.
	History(ctx context.Context, key string) ([]Change, error)
	// SetRollback sets a rollback flag and returns the resulting state.
	// Key "" sets the global flag; any other key sets that rule's flag,
	// which bumps the rule's version. Setting a flag to the value it
	// already has changes nothing and records nothing. ifVersion
	// AnyVersion sets it whatever the rule's version; N > 0 requires that
	// the rule's current version is N, and otherwise fails with
	// ErrConflict (the SRM freeze rolls back only the version it judged).
	// The global flag takes AnyVersion only.
	SetRollback(ctx context.Context, key string, on bool, ifVersion int64, m Meta) (State, error)
	// Changes returns a channel that receives the new revision after every
	// committed change. It is buffered and coalescing: a slow reader finds
	// the latest revision and writers never block on it. Every call returns
	// the same channel, meant for one consumer (the reloader); it is closed
	// by Close.
	Changes() <-chan int64
	// Close releases the store. Later calls fail with ErrClosed.
	Close() error
}

// ValidKey reports whether key has the form of a rule key (rulekey.Valid).
func ValidKey(key string) bool { return rulekey.Valid(key) }

// KeyPattern is the documented form of a rule key, for error messages.
const KeyPattern = rulekey.Pattern

// The checks below are every store's, so that the stores accept the same
// calls and fail them with the same messages.

// CheckVersion applies the ifVersion precondition of Put (forPut) or
// Delete to key, whose last version is version and which exists or not.
// Its errors wrap ErrConflict.
func CheckVersion(key string, version int64, exists bool, ifVersion int64, forPut bool) error {
	switch {
	case ifVersion == AnyVersion:
		return nil
	case ifVersion == 0 && exists:
		what := "put"
		if !forPut {
			what = "delete"
		}
		return fmt.Errorf("rule %q: version is %d, If-Match wanted 0 (%s only if absent): %w", key, version, what, ErrConflict)
	case ifVersion == 0:
		return nil
	case !exists && version > 0:
		return fmt.Errorf("rule %q: deleted at version %d, If-Match wanted %d: %w", key, version, ifVersion, ErrConflict)
	case !exists:
		return fmt.Errorf("rule %q: does not exist, If-Match wanted %d: %w", key, ifVersion, ErrConflict)
	case version != ifVersion:
		return fmt.Errorf("rule %q: version is %d, If-Match wanted %d: %w", key, version, ifVersion, ErrConflict)
	}
	return nil
}

// CheckRollbackVersion checks SetRollback's ifVersion before the store is
// read: AnyVersion or a positive version for a rule, AnyVersion for the
// global flag.
func CheckRollbackVersion(key string, ifVersion int64) error {
	switch {
	case ifVersion == AnyVersion:
		return nil
	case key == "":
		return fmt.Errorf("if_version %d: the global rollback flag has no version: %w", ifVersion, ErrInvalid)
	case ifVersion <= 0:
		return fmt.Errorf("if_version %d: must be a version (> 0) or AnyVersion: %w", ifVersion, ErrInvalid)
	}
	return nil
}

// NotFound is the error for a rule key that does not exist.
func NotFound(key string) error {
	return fmt.Errorf("rule %q: %w", key, ErrNotFound)
}

// NormalizeRule checks that rule is one JSON object in UTF-8 of at most
// limit bytes and returns it compacted, in a fresh slice the caller cannot
// modify afterwards. Its errors wrap ErrInvalid.
func NormalizeRule(rule json.RawMessage, limit int) (json.RawMessage, error) {
	if len(rule) > limit {
		return nil, fmt.Errorf("rule is %d bytes, limit is %d: %w", len(rule), limit, ErrInvalid)
	}
	if !utf8.Valid(rule) {
		return nil, fmt.Errorf("rule is not valid UTF-8: %w", ErrInvalid)
	}
	var buf bytes.Buffer
	buf.Grow(len(rule))
	if err := json.Compact(&buf, rule); err != nil {
		return nil, fmt.Errorf("rule is not valid JSON (%v): %w", err, ErrInvalid)
	}
	if !IsObject(buf.Bytes()) {
		return nil, fmt.Errorf("rule is not a JSON object: %w", ErrInvalid)
	}
	return buf.Bytes(), nil
}

// IsObject reports whether b, known to be valid JSON, is an object.
func IsObject(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && b[0] == '{'
}

// Notify hands rev to a Changes channel (capacity 1) without blocking,
// replacing a revision the reader has not taken yet. It must have a single
// sender at a time.
func Notify(ch chan int64, rev int64) {
	for {
		select {
		case ch <- rev:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}
