// Package etcdstore implements store.Store on etcd v3, so that gateways that
// share a key prefix share their rules, and keeps a registry of live
// upstream instances next to them.
//
// A store is selected by the URL etcd://HOST:PORT[,HOST:PORT]/PREFIX (see
// ParseURL; etcds:// turns TLS on); TLS files and authentication come from
// the config file (see Config). It behaves exactly like the file store:
// same validation, same versions (per key, never reused after delete and
// re-create), same store revisions, same history, same error messages (the
// checks are package store's). The conformance suite
// (internal/store/storetest) runs against both.
//
// # Key layout
//
// Under PREFIX (normalized to "/PREFIX/"):
//
//	fleet/rollout/...                   rollout elections and counters (package rollout), on leases
//	history/<key>/<version, 19 digits>  one store.Change as JSON, per retained version
//	history/_global/<version>           changes of the global rollback flag
//	instances/<service>/<escaped addr>  an Instance as JSON, bound to its lease
//	meta/global                         {"rolled_back":bool,"version":n}
//	meta/revision                       {"revision":n,"key","op","version","at","follows"} of the last change
//	rules/<key>                         the current store.Entry as JSON
//
// Versions are zero-padded so that etcd's byte order is numeric order:
// History is one descending range read with a limit. meta/ and rules/ sort
// after history/ and instances/, so the whole current state is one
// contiguous range: a single range read returns it at one etcd revision,
// and a single watch follows it.
//
// # Which revision
//
// State.Revision is the store's own counter in meta/revision, not etcd's
// revision: it starts at 0 and grows by exactly one per committed change,
// as in the file store. etcd's revision would also be monotonic, but it
// counts every write to the cluster, other prefixes, instance registrations
// and other tenants included, so revisions would jump, the file store's
// contract and its tests would not carry over, and a prefix copied to
// another cluster (etcdctl make-mirror, a migration) would restart at that
// cluster's revision and look older to every gateway that compares
// revisions with "newer than". The counter is data, so it travels with the
// rules. Its cost is that every write compares it, so writes to different
// rules are serialized across gateways; rule writes are rare and human, and
// the file store serializes them too.
//
// # Writes
//
// A write reads the counter, the rule (or the flag) and the newest history
// key of that rule in one read-only transaction, decides exactly as the
// file store does (conflict, not found, no-op), then commits one
// transaction: if the mod revisions of meta/revision and of the rule key
// are unchanged, put (or delete) the rule, put its history record, put the
// new counter and delete the history beyond HistoryLimit. If the comparison
// fails, another writer committed in between, and the write decides again
// on the new state, which may now be a conflict. Two gateways can never both
// win a compare-and-set: both compare the same counter and etcd applies one
// transaction at a time. The version of a deleted rule lives on in its
// newest history record (pruning always keeps at least one), so versions
// are never reused. The new meta/revision names, as "follows", the etcd
// revision of the one it replaces (the one the transaction compared).
//
// A write whose context carries a store.Check (the gateway's Commit puts
// one there) also reads the whole state in its read transaction and runs
// the check on it and on the state the plan leads to, on every attempt:
// the state it judges is exactly the one it commits on top of. Checking
// only the gateway's own copy beforehand let two gateways each store one
// half of a layer overlap, since neither copy had the other's write yet,
// and a write that lost the race decided again on the version alone.
//
// Each history record holds the rule before and after, as in the file
// store, so a write costs about three copies of the rule in one
// transaction; a rule larger than a third of etcd's --max-request-bytes
// (1.5 MiB by default) is refused with store.ErrInvalid before it is sent.
//
// # Watch and reads
//
// One goroutine watches the range and applies each watch response, which
// etcd never splits inside a revision, to a private view, then publishes an
// immutable snapshot and notifies Changes. Load and Get read the snapshot;
// a writer returns only once the snapshot includes its commit, so a process
// reads its own writes. History reads etcd.
//
// The etcd client resumes a broken watch by itself but stays silent while
// it cannot. So a quorum read of meta/revision every ProbeInterval checks
// that etcd answers, and that the watch delivers the store changes the
// probes see (within max(2*ProbeInterval, 2s)). On compaction
// (ErrCompacted), a lost leader, an unanswered probe or a stuck watch, the
// loop re-reads the range with backoff and watches again from the revision
// of that read; every restart is counted (WatchRestarts) and followed by a
// Changes notification, so the gateway reloads.
//
// # A replaced history
//
// etcd restored from a backup (a snapshot, or a copy of its data
// directory) comes back at an older revision, with the same cluster and
// member ids. The client resumes its watch from the revision it had
// reached, which the restored etcd has not: the watch waits, or, once
// other writes have carried etcd's revision past it, delivers the new
// history's changes as if they followed the old ones; and a writer that
// waits for the watch to reach its commit finds it reached already. So
// the store compares every quorum read with the state it applied
// (position.leadsTo): etcd's revision and the store revision must not go
// back, the same store revision must have been committed at the same etcd
// revision, and a later one at a later etcd revision than the state had
// reached. The watch also checks that each store change follows the last
// one applied (the revision grows by one and "follows" matches). The
// probe, a reconnection, the watch and any write can so notice a replaced
// history: the watch ends, the range is read again, and that state is
// published although its revision may be lower, in a new epoch
// (store.State.Epoch, HistoryResets), with a warning. etcd is then the
// truth: an operator who restores a backup means its rules to serve, and
// a gateway that kept the old ones would differ from one that restarts. A
// write that found the history replaced waits for that re-read and starts
// over, so that it commits on top of, and is served from, the new history.
//
// # Outages
//
// While etcd is unreachable, Load keeps returning the last state, Synced
// reports false (for /readyz), and writes fail within WriteTimeout with an
// error wrapping store.ErrUnavailable, "etcd at 127.0.0.1:2379 is
// unreachable: write not applied". A write is never applied locally: the
// gateways sharing a prefix must not diverge. A transaction that was sent
// but not confirmed is reported as possibly applied; the watch shows what
// happened once etcd is back.
//
// Every synced state is written to DataDir/etcd-cache.json (temporary file,
// fsync, rename, directory fsync), so that Open succeeds during an outage
// by serving the cache, Stale until etcd is reached. Without a cache Open
// fails, because a gateway starting with no rules would route differently
// from its peers.
//
// # Instance registry
//
// Register writes an Instance under a lease and keeps it alive, registering
// again if the lease is lost; when the process dies, the lease expires after
// its TTL and the instance disappears. WatchInstances lists and watches
// instances and hands the full list of a service to a callback on every
// change. Both take the client (Store.Client) and prefix explicitly.
//
// # Departures from the anchors
//
// Traefik's KV providers hand their watcher the whole prefix, listed again,
// on every change. That is simpler, but it costs a full range read per
// change on every gateway; applying the watch events of a response to a
// view costs one read per reconnect and still publishes only whole
// revisions.
package etcdstore
