package geo

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/oschwald/maxminddb-golang/v2"
)

// mmdbRecord is the part of a GeoIP2 City or Country record that a Region
// needs. Decoding into it skips everything else (location, postal code,
// traits); the names maps are what a decode allocates, once per record,
// since LookupIP caches the result.
type mmdbRecord struct {
	Country struct {
		ISOCode string            `maxminddb:"iso_code"`
		Names   map[string]string `maxminddb:"names"`
	} `maxminddb:"country"`
	Subdivisions []struct {
		ISOCode string            `maxminddb:"iso_code"`
		Names   map[string]string `maxminddb:"names"`
	} `maxminddb:"subdivisions"`
	City struct {
		Names map[string]string `maxminddb:"names"`
	} `maxminddb:"city"`
}

// database is one loaded GeoIP file and the regions decoded from it. It is
// published through an atomic.Pointer and never modified afterwards, except
// for its cache, which is safe for concurrent use.
type database struct {
	reader *maxminddb.Reader
	file   fileID
	dbType string
	built  time.Time
	cache  *regionCache[uintptr]
}

// fileID tells whether the file at a path is still the one that was loaded:
// a rename over it changes the inode, an in-place write the size or mtime.
type fileID struct {
	info os.FileInfo
}

func statFile(path string) (fileID, error) {
	fi, err := os.Stat(path) // follows symlinks, so a Kubernetes ..data swap counts as a change
	return fileID{fi}, err
}

func (a fileID) same(b fileID) bool {
	if a.info == nil || b.info == nil {
		return a.info == b.info
	}
	return os.SameFile(a.info, b.info) && a.info.Size() == b.info.Size() && a.info.ModTime().Equal(b.info.ModTime())
}

// loadDatabase reads, opens and verifies the MaxMind DB at path. It also
// returns the identity the file had before it was read, even on failure:
// a file still being written when it was read differs from that identity
// once the writer is done, so it is retried, not written off.
func loadDatabase(path string) (*database, fileID, error) {
	id, err := statFile(path)
	if err != nil {
		return nil, id, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, id, err
	}
	rd, err := maxminddb.OpenBytes(data)
	if err != nil {
		return nil, id, fmt.Errorf("open %s: %w", path, err)
	}
	if len(rd.Metadata.Description) == 0 {
		// Verify demands a description, which the format does not: files
		// built with mmdbwriter or by other vendors may have none, and it
		// is documentation only. Give it one so the structural checks run.
		rd.Metadata.Description = map[string]string{"en": rd.Metadata.DatabaseType}
	}
	if err := rd.Verify(); err != nil {
		return nil, id, fmt.Errorf("verify %s: %w", path, err)
	}
	t := rd.Metadata.DatabaseType
	if !hasGeoData(t) {
		return nil, id, fmt.Errorf("%s: database type %q has no country or city data", path, t)
	}
	return &database{
		reader: rd,
		file:   id,
		dbType: t,
		built:  rd.Metadata.BuildTime(),
		cache:  newRegionCache[uintptr](regionCacheLimit),
	}, id, nil
}

// hasGeoData accepts the City, Country and Enterprise families of MaxMind,
// and DB-IP's City and Country files, which share their layout. It refuses
// ASN, ISP, Anonymous-IP and similar databases, whose records have no
// country, so that a wrong path fails at load and not on every lookup.
func hasGeoData(dbType string) bool {
	t := strings.ToLower(dbType)
	return strings.Contains(t, "city") || strings.Contains(t, "country") || strings.Contains(t, "enterprise")
}

// LookupIP returns the region the GeoIP database gives for ip. It returns
// false when no database is configured or loaded, or ip is not in it.
//
// A record is decoded once per database and remembered by its offset in the
// file (a MaxMind DB stores each distinct record once, and all networks with
// the same data point at it), so repeated lookups cost a tree walk and a
// map read and allocate nothing. It is safe for concurrent use, including
// with reloads.
func (r *Resolver) LookupIP(ip netip.Addr) (Region, bool) {
	db := r.db.Load()
	if db == nil || !ip.IsValid() {
		return Region{}, false
	}
	res := db.reader.Lookup(ip.Unmap())
	if !res.Found() {
		return Region{}, false
	}
	off := res.Offset()
	if reg := db.cache.get(off); reg != nil {
		return *reg, reg.Names != nil
	}
	reg, err := r.decodeRecord(res)
	if err != nil {
		// A record of another shape (a database with a different schema)
		// is reported once and then cached as "none" like any other.
		r.logger.Warn("decode geoip record", "ip", ip.String(), "err", err)
		reg = Region{}
	}
	db.cache.put(off, &reg)
	return reg, reg.Names != nil
}

// decodeRecord builds the Region of one database record.
func (r *Resolver) decodeRecord(res maxminddb.Result) (Region, error) {
	var rec mmdbRecord
	if err := res.Decode(&rec); err != nil {
		return Region{}, err
	}
	reg, _ := r.cat.finish(r.draftFromRecord(&rec), SourceGeoIP)
	return reg, nil
}

func (r *Resolver) draftFromRecord(rec *mmdbRecord) draft {
	var d draft
	d.country = strings.ToUpper(rec.Country.ISOCode)
	// Chinese records also keep their Chinese names whatever the display
	// language, so that a rule saying 深圳 matches (as LookupPhone does).
	zh := d.country == "CN" && r.cat.base != "zh"
	names := func(m map[string]string) []string {
		local, en := r.cat.pick(m)
		if local == "" && en == "" {
			return nil
		}
		if zh && m["zh-CN"] != "" {
			return []string{local, en, m["zh-CN"]}
		}
		return []string{local, en}
	}
	d.countryNames = names(rec.Country.Names)
	if len(rec.Subdivisions) > 0 {
		s := rec.Subdivisions[0]
		if s.ISOCode != "" && d.country != "" {
			d.provinceCode = d.country + "-" + strings.ToUpper(s.ISOCode)
		}
		d.provinceNames = names(s.Names)
	}
	d.cityNames = names(rec.City.Names)
	return d
}

// GeoIPStatus describes the GeoIP database in service, for the admin API
// and metrics.
type GeoIPStatus struct {
	// Path is the configured file.
	Path string `json:"path"`
	// DatabaseType is the file's own name for its kind, such as "GeoLite2-City".
	DatabaseType string `json:"database_type,omitempty"`
	// BuildTime is when the database was built, from its metadata.
	BuildTime time.Time `json:"build_time,omitzero"`
	// ModTime is the modification time of the file that was loaded.
	ModTime time.Time `json:"mod_time,omitzero"`
	// Loads counts successful loads, the first one included.
	Loads uint64 `json:"loads"`
	// Err is why the newest version of the file was not loaded; nil once a
	// version loads. The previous database stays in service meanwhile.
	Err error `json:"-"`
}

// GeoIPStatus returns the state of the GeoIP source. It is safe for
// concurrent use.
func (r *Resolver) GeoIPStatus() GeoIPStatus {
	st := GeoIPStatus{Path: r.cfg.GeoIPPath, Loads: r.loads.Load()}
	if db := r.db.Load(); db != nil {
		st.DatabaseType = db.dbType
		st.BuildTime = db.built
		st.ModTime = db.file.info.ModTime()
	}
	r.reloadMu.Lock()
	st.Err = r.lastErr
	r.reloadMu.Unlock()
	return st
}

// Reload loads the GeoIP file again, whether or not it changed, and puts it
// in service. If it fails, the database in service stays and the error is
// returned, logged and kept in GeoIPStatus. It is safe for concurrent use.
func (r *Resolver) Reload() error {
	if r.cfg.GeoIPPath == "" {
		return errors.New("no geoip_db configured")
	}
	r.reloadMu.Lock()
	defer r.reloadMu.Unlock()
	return r.reloadLocked()
}

func (r *Resolver) reloadLocked() error {
	db, id, err := loadDatabase(r.cfg.GeoIPPath)
	if err != nil {
		r.lastErr = err
		r.failed = id
		r.logger.Error("geoip database not reloaded; keeping the previous one", "path", r.cfg.GeoIPPath, "err", err)
		return err
	}
	if r.closed.Load() {
		return errors.New("resolver closed")
	}
	// The old reader is not closed: lookups that loaded it may still be
	// running, and its memory is ordinary heap that the collector frees.
	r.db.Store(db)
	r.lastErr = nil
	r.failed = fileID{}
	r.loads.Add(1)
	r.logger.Info("geoip database loaded", "path", r.cfg.GeoIPPath, "database_type", db.dbType,
		"build_time", db.built.UTC().Format(time.RFC3339), "networks", db.reader.Metadata.NodeCount)
	return nil
}

// reloadIfChanged reloads when the file is not the one in service and not
// one that already failed, so that unrelated events in the directory, and a
// bad file sitting there, cost a stat and no log line.
func (r *Resolver) reloadIfChanged() {
	r.reloadMu.Lock()
	defer r.reloadMu.Unlock()
	id, err := statFile(r.cfg.GeoIPPath)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) || r.lastErr == nil {
			// A missing file is usually the gap between unlink and rename;
			// report it once and wait for the next event.
			r.lastErr = err
			r.logger.Warn("geoip database not readable; keeping the previous one", "path", r.cfg.GeoIPPath, "err", err)
		}
		return
	}
	if db := r.db.Load(); db != nil && db.file.same(id) {
		return
	}
	if r.failed.same(id) {
		return
	}
	_ = r.reloadLocked()
}

// reloadDebounce is how long the directory must stay quiet after an event
// before the file is read: a copy into place is many writes.
const reloadDebounce = 100 * time.Millisecond

// Watch starts reloading the GeoIP file when it changes and returns once the
// watch is in place, so a change made after Watch returns is seen. It
// watches the file's directory, not the file: an update renamed over the
// file (geoipupdate, mv, a Kubernetes ConfigMap's ..data swap) replaces the
// inode a file watch would follow. Watching stops when ctx is done or the
// Resolver is closed. Without geoip_db it does nothing. Call it at most once.
func (r *Resolver) Watch(ctx context.Context) error {
	if r.cfg.GeoIPPath == "" {
		return nil
	}
	if r.closed.Load() {
		return errors.New("geo: Watch after Close")
	}
	if !r.watching.CompareAndSwap(false, true) {
		return errors.New("geo: Watch called twice")
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", r.cfg.GeoIPPath, err)
	}
	dir := filepath.Dir(r.cfg.GeoIPPath)
	if err := w.Add(dir); err != nil {
		_ = w.Close()
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	r.wg.Add(1)
	go r.watchLoop(ctx, w)
	return nil
}

func (r *Resolver) watchLoop(ctx context.Context, w *fsnotify.Watcher) {
	defer r.wg.Done()
	defer w.Close()
	// The file may have changed between New and Watch.
	r.reloadIfChanged()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.done:
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			r.logger.Debug("geoip directory event", "event", ev)
			timer.Reset(reloadDebounce)
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			// Overflow means events were lost: check the file anyway.
			r.logger.Warn("geoip watch", "err", err)
			timer.Reset(reloadDebounce)
		case <-timer.C:
			r.reloadIfChanged()
		}
	}
}
