package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/graygate/graygate/internal/store"
)

// current is what a write reads before it decides, all at one etcd
// revision.
type current struct {
	etcdRev  int64 // the revision the read was made at
	storeRev int64
	// counterMod is the etcd mod revision of meta/revision: the etcd
	// revision of the last store change (0 for an empty store). Every
	// write compares it, so no two writes can both commit against the same
	// state.
	counterMod int64
	// targetMod is the mod revision of the rule's key or of meta/global.
	targetMod int64
	entry     *store.Entry // the rule, nil if it does not exist
	global    globalRecord
	// version is the last version ever written of the key (or of the
	// global flag), which survives a delete in the key's history.
	version int64
	// all is everything under meta/ and rules/, read only for a write
	// that carries a store.Check.
	all *view
}

func (c current) pos() position {
	return position{etcdRev: c.etcdRev, storeRev: c.storeRev, counterMod: c.counterMod}
}

// plan is one change, ready to commit.
type plan struct {
	target string // etcd key of the rule or of the global flag
	value  []byte // its new value; nil deletes it
	change store.Change
}

// decided wraps an error of the decision (conflict, not found) that callers
// return without their own prefix, exactly as the file store words it.
type decided struct{ err error }

func (d decided) Error() string { return d.err.Error() }
func (d decided) Unwrap() error { return d.err }

// write runs read, decide, commit, and again when another writer commits in
// between, until the change commits, decide refuses or returns no plan (a
// no-op), or WriteTimeout runs out. key is a rule key or store.GlobalKey.
// After a commit it waits, within the same timeout, until the watch has
// applied the change, so that this process reads its own write.
//
// If ctx carries a store.Check, each attempt reads the whole state with
// the rule and runs the check on it and on the state the plan leads to,
// so the check holds for exactly the state the transaction commits on top
// of (it compares meta/revision).
//
// A read that cannot follow the published snapshot in one etcd history
// (etcd was restored from a backup and the watch has not noticed yet)
// makes the watch loop re-read etcd first: waiting for the watch to apply
// a revision of another history would return at once, or never.
func (s *Store) write(ctx context.Context, key string, decide func(current) (*plan, error)) error {
	done, err := s.begin()
	if err != nil {
		return err
	}
	defer done()
	octx, cancel := s.opContext(ctx)
	defer cancel()
	cli := s.cli.Load()
	if cli == nil {
		return fmt.Errorf("%s is unreachable: write not applied (not connected since start): %w", s.where, store.ErrUnavailable)
	}
	check := store.CheckFrom(ctx)
	lost := 0
	for {
		// Loaded before the read, so the read comes after every
		// revision the snapshot holds.
		was := s.snap.Load()
		cur, err := s.read(octx, cli, key, check != nil)
		if err != nil {
			return s.etcdError(octx, ctx, err, lost, "is unreachable: write not applied")
		}
		var epoch int64
		if was != nil {
			if !was.pos().leadsTo(cur.pos()) {
				s.log.Warn("a write read a state of etcd that does not follow the one applied; re-reading etcd first",
					"key", key, "read", cur.pos().String(), "applied", was.pos().String())
				if err := s.awaitResync(octx, was); err != nil {
					return s.etcdError(octx, ctx, err, lost, "has a history that is not the one applied (restored from a backup?) and it could not be re-read: write not applied")
				}
				continue
			}
			epoch = was.state.Epoch
		}
		p, err := decide(cur)
		if err != nil {
			return decided{err}
		}
		if p == nil {
			_ = s.waitApplied(octx, cur.counterMod, epoch, cur.pos())
			return nil
		}
		if check != nil {
			base, next := cur.all.snapshot().state, cur.all.with(p).snapshot().state
			if err := check(base, next); err != nil {
				return decided{err}
			}
		}
		if s.opts.commitHook != nil {
			s.opts.commitHook()
		}
		rev, ok, err := s.commit(octx, cli, key, cur, p)
		if errors.Is(err, store.ErrInvalid) {
			return err
		}
		if err != nil {
			err = s.etcdError(octx, ctx, err, lost, "did not confirm the write: it may or may not have been applied")
			if errors.Is(err, store.ErrUnavailable) {
				err = store.Unconfirmed(err)
			}
			return err
		}
		if !ok {
			// Another writer committed since the read: decide again on
			// the new state, which may now be a conflict.
			lost++
			continue
		}
		switch err := s.waitApplied(octx, rev, epoch, cur.pos()); {
		case err == nil:
		case errors.Is(err, errHistory):
			return fmt.Errorf("%s committed the write at revision %d, then its history was replaced (restored from a backup?): the write may not be part of what it holds now: %w",
				s.where, rev, store.ErrUnavailable)
		default:
			s.log.Warn("write committed, but the watch has not applied it yet", "key", key, "etcd_revision", rev)
		}
		return nil
	}
}

// with returns a copy of v with p applied.
func (v *view) with(p *plan) *view {
	next := v.clone()
	if p.value == nil {
		next.del([]byte(p.target))
	} else {
		_ = next.put([]byte(p.target), p.value, 0) // p.value was just encoded
	}
	next.revision = p.change.Revision
	return next
}

// read fetches what decide needs in one read-only transaction, and with all
// the whole state too.
func (s *Store) read(ctx context.Context, cli *clientv3.Client, key string, all bool) (current, error) {
	target := s.keys.global
	if key != store.GlobalKey {
		target = s.keys.rule(key)
	}
	ops := []clientv3.Op{
		clientv3.OpGet(s.keys.revision),
		clientv3.OpGet(target),
		clientv3.OpGet(s.keys.historyOf(key), clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(1)),
	}
	if all {
		ops = append(ops, clientv3.OpGet(s.keys.viewStart, clientv3.WithRange(s.keys.viewEnd)))
	}
	resp, err := cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return current{}, err
	}
	cur := current{etcdRev: resp.Header.Revision}
	bad := func(what string, err error) (current, error) {
		return current{}, fmt.Errorf("%s under %s: %v: %w", what, s.keys.prefix, err, store.ErrCorrupt)
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		var r revisionRecord
		if err := json.Unmarshal(kvs[0].Value, &r); err != nil {
			return bad("meta/revision", err)
		}
		cur.storeRev, cur.counterMod = r.Revision, kvs[0].ModRevision
	}
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
		cur.targetMod = kvs[0].ModRevision
		if key == store.GlobalKey {
			if err := json.Unmarshal(kvs[0].Value, &cur.global); err != nil {
				return bad("meta/global", err)
			}
			cur.version = cur.global.Version
		} else {
			var e store.Entry
			if err := json.Unmarshal(kvs[0].Value, &e); err != nil {
				return bad("rule "+key, err)
			}
			cur.entry = &e
			cur.version = e.Version
		}
	}
	if kvs := resp.Responses[2].GetResponseRange().GetKvs(); len(kvs) > 0 {
		v, err := s.keys.versionOf(key, string(kvs[0].Key))
		if err != nil {
			return bad("history of "+key, err)
		}
		cur.version = max(cur.version, v)
	}
	if all {
		cur.all = newView(s.keys)
		for _, kv := range resp.Responses[3].GetResponseRange().GetKvs() {
			if err := cur.all.put(kv.Key, kv.Value, kv.ModRevision); err != nil {
				s.log.Error("skipping unreadable key", "key", string(kv.Key), "error", err)
			}
		}
	}
	return cur, nil
}

// commit writes p in one transaction that holds only if nothing changed
// since cur was read: the rule (or flag), its history record, the new store
// revision and the pruning of history beyond HistoryLimit. It returns the
// etcd revision of the commit and whether the comparison held.
func (s *Store) commit(ctx context.Context, cli *clientv3.Client, key string, cur current, p *plan) (int64, bool, error) {
	c := p.change
	hist, err := marshal(c)
	if err != nil {
		return 0, false, fmt.Errorf("encode history record: %w", err)
	}
	rec, err := marshal(revisionRecord{Revision: c.Revision, Key: key, Op: c.Op, Version: c.Version, At: c.At, Follows: cur.counterMod})
	if err != nil {
		return 0, false, fmt.Errorf("encode revision record: %w", err)
	}
	hkey := s.keys.historyKey(key, c.Version)
	size := len(p.target) + len(p.value) + len(hkey) + len(hist) + len(s.keys.revision) + len(rec) + 512
	if size > s.opts.MaxRequestBytes {
		return 0, false, fmt.Errorf("the change needs an etcd transaction of %d bytes (the entry, and a history record with the rule before and after), above the %d-byte request limit (etcd --max-request-bytes, Options.MaxRequestBytes): %w",
			size, s.opts.MaxRequestBytes, store.ErrInvalid)
	}
	ops := make([]clientv3.Op, 0, 4)
	if p.value == nil {
		ops = append(ops, clientv3.OpDelete(p.target))
	} else {
		ops = append(ops, clientv3.OpPut(p.target, string(p.value)))
	}
	ops = append(ops, clientv3.OpPut(hkey, string(hist)), clientv3.OpPut(s.keys.revision, string(rec)))
	if keep := c.Version - int64(s.opts.HistoryLimit) + 1; keep > 1 {
		ops = append(ops, clientv3.OpDelete(s.keys.historyOf(key), clientv3.WithRange(s.keys.historyKey(key, keep))))
	}
	resp, err := cli.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(s.keys.revision), "=", cur.counterMod),
		clientv3.Compare(clientv3.ModRevision(p.target), "=", cur.targetMod),
	).Then(ops...).Commit()
	if err != nil {
		return 0, false, err
	}
	return resp.Header.Revision, resp.Succeeded, nil
}

// etcdError explains a failed etcd call of an operation bounded by octx and
// called with ctx. Unreachability reads "<where> <consequence> (<detail>)"
// and wraps store.ErrUnavailable.
func (s *Store) etcdError(octx, ctx context.Context, err error, lost int, consequence string) error {
	switch {
	case s.ctx.Err() != nil:
		return store.ErrClosed
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, rpctypes.ErrRequestTooLarge):
		return fmt.Errorf("%s refused the transaction as too large; raise its --max-request-bytes and Options.MaxRequestBytes together: %w", s.where, store.ErrInvalid)
	}
	timedOut := errors.Is(context.Cause(octx), errOpTimeout)
	if !timedOut && !unreachable(err) {
		return fmt.Errorf("%s: %w", s.where, err)
	}
	detail := err.Error()
	if timedOut {
		detail = fmt.Sprintf("no answer within %v", s.opts.WriteTimeout)
		if lost > 0 {
			detail += fmt.Sprintf(", after losing %d races to other writers", lost)
		}
	}
	return fmt.Errorf("%s %s (%s): %w", s.where, consequence, detail, store.ErrUnavailable)
}

// unreachable reports whether err means that etcd could not be reached or
// has no quorum, as opposed to refusing the request.
func unreachable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable || ee.Code() == codes.DeadlineExceeded
	}
	if st, ok := status.FromError(err); ok {
		return st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded
	}
	return false
}

// newChange starts the record of the next change of the key cur was read
// for. It reads the clock, so it is called only for a change that will be
// attempted.
func (s *Store) newChange(key string, cur current, m store.Meta) store.Change {
	return store.Change{
		Key:      key,
		Version:  cur.version + 1,
		Revision: cur.storeRev + 1,
		// UTC drops the monotonic reading and the zone, so the time reads
		// back from etcd exactly as it is returned now.
		At:     s.opts.Now().UTC(),
		By:     strings.ToValidUTF8(m.By, "\uFFFD"),
		Reason: strings.ToValidUTF8(m.Reason, "\uFFFD"),
	}
}

// Put writes rule under key; see store.Store. The rule must be a JSON
// object; it is stored compacted.
func (s *Store) Put(ctx context.Context, key string, rule json.RawMessage, ifVersion int64, m store.Meta) (store.Entry, error) {
	fail := func(err error) (store.Entry, error) { return store.Entry{}, fmt.Errorf("put rule %q: %w", key, err) }
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if !validKey(key) {
		return fail(fmt.Errorf("key must match %s: %w", store.KeyPattern, store.ErrInvalid))
	}
	if ifVersion < store.AnyVersion {
		return fail(fmt.Errorf("ifVersion %d is below AnyVersion: %w", ifVersion, store.ErrInvalid))
	}
	revert := false
	switch m.Op {
	case "", store.OpCreate, store.OpUpdate:
	case store.OpRevert:
		revert = true
	default:
		return fail(fmt.Errorf("op %q is not a put operation: %w", m.Op, store.ErrInvalid))
	}
	body, err := store.NormalizeRule(rule, s.opts.MaxRequestBytes)
	if err != nil {
		return fail(err)
	}
	var out store.Entry
	err = s.write(ctx, key, func(cur current) (*plan, error) {
		exists := cur.entry != nil
		if err := store.CheckVersion(key, cur.version, exists, ifVersion, true); err != nil {
			return nil, err
		}
		c := s.newChange(key, cur, m)
		switch {
		case revert:
			c.Op = store.OpRevert
		case exists:
			c.Op = store.OpUpdate
		default:
			c.Op = store.OpCreate
		}
		rolledBack := exists && cur.entry.RolledBack
		if exists {
			c.Before = cur.entry.Rule
		}
		c.After = body
		c.RolledBackBefore, c.RolledBackAfter = rolledBack, rolledBack
		out = store.Entry{Key: key, Rule: body, Version: c.Version, Revision: c.Revision,
			UpdatedAt: c.At, UpdatedBy: c.By, Reason: c.Reason, RolledBack: rolledBack}
		val, err := marshal(out)
		if err != nil {
			return nil, err
		}
		return &plan{target: s.keys.rule(key), value: val, change: c}, nil
	})
	var d decided
	if errors.As(err, &d) {
		return store.Entry{}, d.err
	}
	if err != nil {
		return fail(err)
	}
	return cloneEntry(out), nil
}

// Delete removes key; see store.Store.
func (s *Store) Delete(ctx context.Context, key string, ifVersion int64, m store.Meta) (store.Change, error) {
	fail := func(err error) (store.Change, error) {
		return store.Change{}, fmt.Errorf("delete rule %q: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if !validKey(key) {
		return fail(fmt.Errorf("key must match %s: %w", store.KeyPattern, store.ErrInvalid))
	}
	if ifVersion < store.AnyVersion {
		return fail(fmt.Errorf("ifVersion %d is below AnyVersion: %w", ifVersion, store.ErrInvalid))
	}
	if m.Op != "" && m.Op != store.OpDelete {
		return fail(fmt.Errorf("op %q is not %q: %w", m.Op, store.OpDelete, store.ErrInvalid))
	}
	var out store.Change
	err := s.write(ctx, key, func(cur current) (*plan, error) {
		if cur.entry == nil {
			return nil, store.NotFound(key)
		}
		if err := store.CheckVersion(key, cur.version, true, ifVersion, false); err != nil {
			return nil, err
		}
		c := s.newChange(key, cur, m)
		c.Op = store.OpDelete
		c.Before = cur.entry.Rule
		c.RolledBackBefore = cur.entry.RolledBack
		out = c
		return &plan{target: s.keys.rule(key), change: c}, nil
	})
	var d decided
	if errors.As(err, &d) {
		return store.Change{}, d.err
	}
	if err != nil {
		return fail(err)
	}
	return out, nil
}

// SetRollback sets the global (key "") or a rule's rollback flag; see
// store.Store. It returns the published state once it includes the change.
func (s *Store) SetRollback(ctx context.Context, key string, on bool, ifVersion int64, m store.Meta) (store.State, error) {
	op := store.OpResume
	if on {
		op = store.OpRollback
	}
	what := fmt.Sprintf("%s rule %q", op, key)
	hkey := key
	if key == "" {
		what = op + " globally"
		hkey = store.GlobalKey
	}
	fail := func(err error) (store.State, error) { return store.State{}, fmt.Errorf("%s: %w", what, err) }
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if key != "" && !validKey(key) {
		return fail(fmt.Errorf("key must match %s: %w", store.KeyPattern, store.ErrInvalid))
	}
	if m.Op != "" && m.Op != op {
		return fail(fmt.Errorf("op %q is not %q: %w", m.Op, op, store.ErrInvalid))
	}
	if err := store.CheckRollbackVersion(key, ifVersion); err != nil {
		return fail(err)
	}
	err := s.write(ctx, hkey, func(cur current) (*plan, error) {
		if key == "" {
			if cur.global.RolledBack == on {
				return nil, nil
			}
			c := s.newChange(store.GlobalKey, cur, m)
			c.Op = op
			c.RolledBackBefore, c.RolledBackAfter = !on, on
			val, err := marshal(globalRecord{RolledBack: on, Version: c.Version})
			if err != nil {
				return nil, err
			}
			return &plan{target: s.keys.global, value: val, change: c}, nil
		}
		if cur.entry == nil {
			return nil, store.NotFound(key)
		}
		if err := store.CheckVersion(key, cur.version, true, ifVersion, false); err != nil {
			return nil, err
		}
		if cur.entry.RolledBack == on {
			return nil, nil
		}
		c := s.newChange(key, cur, m)
		c.Op = op
		c.Before, c.After = cur.entry.Rule, cur.entry.Rule
		c.RolledBackBefore, c.RolledBackAfter = !on, on
		e := *cur.entry
		e.Version, e.Revision = c.Version, c.Revision
		e.UpdatedAt, e.UpdatedBy, e.Reason = c.At, c.By, c.Reason
		e.RolledBack = on
		val, err := marshal(e)
		if err != nil {
			return nil, err
		}
		return &plan{target: s.keys.rule(key), value: val, change: c}, nil
	})
	var d decided
	if errors.As(err, &d) {
		return store.State{}, d.err
	}
	if err != nil {
		return fail(err)
	}
	st, err := s.Load(context.WithoutCancel(ctx))
	if err != nil {
		return fail(err)
	}
	return st, nil
}

// History reads the retained changes of key from etcd, newest first, at
// most HistoryLimit of them. Unlike Load it needs etcd: while etcd is
// unreachable it fails with store.ErrUnavailable.
func (s *Store) History(ctx context.Context, key string) ([]store.Change, error) {
	fail := func(err error) ([]store.Change, error) { return nil, fmt.Errorf("history of %q: %w", key, err) }
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if !validKey(key) && key != store.GlobalKey {
		return fail(fmt.Errorf("key must match %s or be %q: %w", store.KeyPattern, store.GlobalKey, store.ErrInvalid))
	}
	done, err := s.begin()
	if err != nil {
		return fail(err)
	}
	defer done()
	octx, cancel := s.opContext(ctx)
	defer cancel()
	cli := s.cli.Load()
	if cli == nil {
		return fail(fmt.Errorf("%s is unreachable: history not read (not connected since start): %w", s.where, store.ErrUnavailable))
	}
	resp, err := cli.Get(octx, s.keys.historyOf(key), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(s.opts.HistoryLimit)))
	if err != nil {
		return fail(s.etcdError(octx, ctx, err, 0, "is unreachable: history not read"))
	}
	if len(resp.Kvs) == 0 {
		return fail(store.ErrNotFound)
	}
	out := make([]store.Change, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		if err := json.Unmarshal(kv.Value, &out[i]); err != nil {
			return fail(fmt.Errorf("decode %s: %v: %w", kv.Key, err, store.ErrCorrupt))
		}
	}
	return out, nil
}
