package etcdstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/graygate/graygate/internal/store"
)

// cacheName is the cache file inside Options.DataDir.
const cacheName = "etcd-cache.json"

// cacheFormat is the version of the cache file's JSON shape.
const cacheFormat = 1

// cacheDoc is the cache file: the last state read from etcd and where it
// came from.
type cacheDoc struct {
	Format       int      `json:"format"`
	Prefix       string   `json:"prefix"`
	Endpoints    []string `json:"endpoints"`
	EtcdRevision int64    `json:"etcd_revision"`
	// CounterRevision is the etcd revision at which State.Revision was
	// committed; absent in caches written before it was kept.
	CounterRevision int64       `json:"counter_revision,omitempty"`
	SyncedAt        time.Time   `json:"synced_at"`
	State           store.State `json:"state"`
}

// cacheFile writes the latest synced snapshot to DataDir in the background,
// one write at a time: a burst of changes costs at most two writes, and the
// watch never waits for the disk.
type cacheFile struct {
	dir, path string
	cfg       Config
	log       *slog.Logger
	now       func() time.Time
	latest    atomic.Pointer[snapshot]
	kick      chan struct{}
	stop      chan struct{}
}

func newCacheFile(dir string, cfg Config, log *slog.Logger) *cacheFile {
	return &cacheFile{
		dir:  dir,
		path: filepath.Join(dir, cacheName),
		cfg:  cfg,
		log:  log,
		now:  time.Now,
		kick: make(chan struct{}, 1),
		stop: make(chan struct{}),
	}
}

// save schedules snap, which must come from etcd, to be written.
func (c *cacheFile) save(snap *snapshot) {
	c.latest.Store(snap)
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// run writes what save schedules until the store's context ends, then
// writes once more if something is pending. The store closes c.stop.
func (c *cacheFile) run() {
	var written *snapshot
	flush := func() {
		snap := c.latest.Load()
		if snap == nil || snap == written {
			return
		}
		if err := c.write(snap); err != nil {
			c.log.Error("could not write the cache file; a restart during an etcd outage would serve an older state", "error", err)
			return
		}
		written = snap
	}
	for {
		select {
		case <-c.kick:
			flush()
		case <-c.stop:
			flush()
			return
		}
	}
}

// write replaces the cache file atomically: a temporary file is written and
// fsynced, renamed over the cache and the directory fsynced, so a crash
// leaves the old cache or the new one, never a mix.
func (c *cacheFile) write(snap *snapshot) error {
	doc := cacheDoc{
		Format:          cacheFormat,
		Prefix:          c.cfg.Prefix,
		Endpoints:       c.cfg.Endpoints,
		EtcdRevision:    snap.etcdRev,
		CounterRevision: snap.counterMod,
		SyncedAt:        c.now().UTC(),
		State:           snap.state,
	}
	data, err := marshal(doc)
	if err != nil {
		return fmt.Errorf("encode cache: %w", err)
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	f, err := os.CreateTemp(c.dir, cacheName+".tmp*")
	if err != nil {
		return fmt.Errorf("create cache: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, c.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write cache %s: %w", c.path, err)
	}
	return store.SyncDir(c.dir)
}

// load reads the cache file. A cache of another prefix is refused: serving
// it would apply another deployment's rules.
func (c *cacheFile) load() (*snapshot, time.Time, error) {
	data, err := os.ReadFile(c.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, time.Time{}, fmt.Errorf("there is no cache file %s", c.path)
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read cache: %w", err)
	}
	var doc cacheDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, time.Time{}, fmt.Errorf("cache file %s is unreadable (%v): %w", c.path, err, store.ErrCorrupt)
	}
	switch {
	case doc.Format != cacheFormat:
		return nil, time.Time{}, fmt.Errorf("cache file %s has format %d, want %d", c.path, doc.Format, cacheFormat)
	case doc.Prefix != c.cfg.Prefix:
		return nil, time.Time{}, fmt.Errorf("cache file %s holds prefix %q, not %q", c.path, doc.Prefix, c.cfg.Prefix)
	}
	rules := doc.State.Rules
	if rules == nil {
		rules = []store.Entry{}
	}
	for i, e := range rules {
		if !validKey(e.Key) || !store.IsObject(e.Rule) || (i > 0 && rules[i-1].Key >= e.Key) {
			return nil, time.Time{}, fmt.Errorf("cache file %s: rules[%d] (%q) is invalid or out of order: %w", c.path, i, e.Key, store.ErrCorrupt)
		}
	}
	doc.State.Rules = rules
	return &snapshot{state: doc.State, etcdRev: doc.EtcdRevision, counterMod: doc.CounterRevision}, doc.SyncedAt, nil
}
