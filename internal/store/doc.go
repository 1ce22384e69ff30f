// Package store keeps the gateway's routing rules in a versioned store: the
// Store interface, and FileStore, the embedded default that lives in a data
// directory. An etcd implementation can satisfy the same interface; nothing
// in it is specific to files.
//
// Rules are opaque JSON objects keyed by a rule key matching
// ^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$. Every change gets the next global
// revision and the next version of its key; versions are never reused, not
// even after delete and re-create. Each key keeps its newest HistoryLimit
// changes. A global one-click rollback flag is recorded under the reserved
// history key GlobalKey.
//
// # On-disk layout
//
// The data directory holds:
//
//	store.lock           flock(2)ed while a process has the store open; holds its pid
//	store.journal        the store: a checkpoint followed by appended changes
//	store.journal.tmp    a checkpoint being written (deleted on open: never valid)
//	store.journal.torn-* a torn tail cut off on open, kept for inspection
//
// store.journal starts with a magic line, then a sequence of frames. A
// frame is a 12-byte header (payload length, CRC-32C of the length, CRC-32C
// of the payload) and a payload of one type byte and one JSON object. The
// first frame is a checkpoint, which says how many base frames follow; the
// base frames hold the retained history of every key (the oldest one of
// each key also carries the state before it), from which the whole state is
// rebuilt. After them come change frames, one per acknowledged write. A
// change frame holds only what the change adds (its key, op, versions,
// time, author, reason, the new rule where there is one, and the new flag);
// Before is derived from the state it applies to. Loading replays every
// frame through the same validation the writer uses, so versions,
// revisions, ops and flags must chain exactly or the file is reported as
// corrupt.
//
// When the change frames have grown by FileOptions.CompactBytes and at
// least doubled the file, the journal is compacted: a new checkpoint of the
// current (pruned) state is written to store.journal.tmp and renamed over
// store.journal. The doubling rule keeps the cost of rewriting a large
// history proportional to the bytes written.
//
// # Why a journal
//
// The alternative, a state file rewritten atomically on every change plus
// per-key history files, costs a rewrite of every rule (several fsyncs and
// a directory fsync) for every write, and needs an ordering argument between
// files that can each be old or new after a crash. The journal commits a
// write with one write(2) and one fsync of one file, whatever the size of
// the rule set, so 500 small Puts take about 500 fsyncs; and since there is
// one file, the state on disk is always one prefix of one history.
//
// # Crash safety
//
//   - A write is acknowledged only after its frame is written with one
//     pwrite at the end of the acknowledged data and the file is fsynced.
//     If the write or fsync fails, the file is cut back to the acknowledged
//     size (and fsynced) before the error is returned; if even that fails
//     the store refuses further writes until it is reopened.
//   - A crash during an append can leave at most one unacknowledged frame,
//     and only at the end of the file: writes are serialized and each one is
//     fsynced before the next starts. What the crash leaves of that frame is
//     a prefix of it (a killed process), or its full length with some pages
//     unwritten, which read as zeros (power loss). On open, such a torn
//     tail is recognised as: a frame header cut short; a frame header that
//     fails its checksum with only zeros after its first bytes; a frame
//     whose length runs past the end of the file; or a last frame whose
//     payload checksum fails. It is copied to store.journal.torn-*, logged
//     and truncated away. Everything else is ErrCorrupt naming the file
//     and offset: a checksum failure with data after it, a frame that
//     decodes badly, or a change that does not follow from the state. The
//     header has its own checksum so that a damaged length is recognised
//     as damage instead of being mistaken for a cut-short tail, which
//     would silently drop the frames after it. (One torn shape is reported
//     as corruption instead: a header that straddles a page boundary whose
//     second page was lost while later pages of the same frame were
//     written. Refusing to open is the safe side of that ambiguity.)
//   - A checkpoint reaches store.journal only by write, fsync, rename,
//     fsync of the directory. A crash before the rename leaves the old
//     journal untouched (the .tmp file is deleted on open); after it, the
//     new journal is complete. Damage anywhere in the checkpoint is
//     therefore always ErrCorrupt, never a torn tail. If the directory
//     fsync fails after the rename, writes are refused until reopen,
//     because the rename may not have reached the disk.
//   - A new store is created the same way, so an empty or headerless
//     journal is corruption, not a fresh store.
//   - The lock is flock on store.lock, which the kernel releases when the
//     process dies, so a crash never leaves the store locked.
//   - A journal removed under an open store (the data dir deleted by hand
//     or by a cleaner of /tmp) is noticed before the next write and on
//     Close, and written back whole from memory with the lock taken again,
//     instead of acknowledging writes into a deleted file that the next
//     start cannot find. A different file in its place is never
//     overwritten: writes are refused until it is gone or the store is
//     reopened on it.
//   - ErrCorrupt also says what an operator can do, since the gateway
//     refuses to start on it: damage to a change leaves the state before
//     it, served again by truncating the file at the offset named; damage
//     to the checkpoint leaves a backup or an empty store.
//
// A torn final frame is indistinguishable from bit rot in the last
// acknowledged frame; the saved copy of the tail exists so that an operator
// can tell.
//
// # Concurrency
//
// Writers are serialized by one mutex and hold the state lock only to apply
// a change that is already durable, so readers (Load, Get, History) never
// wait for the disk. Every value returned is a deep copy.
//
// # Limits
//
// A rule is at most 64 MiB. The whole journal is read into memory on open,
// and the whole state, with history, is kept in memory.
package store
