package geo

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/graygate/graygate/internal/attr"
)

// Input is what one request offers the sources. The caller fills it; the
// Resolver decides which parts to use.
type Input struct {
	// HeaderValue is the region header's value (Config.Header).
	HeaderValue string
	// HeaderTrusted says the request came from a trusted proxy; without it
	// HeaderValue is ignored, since the client could have set it.
	HeaderTrusted bool
	// IP is the client address after trusted-proxy resolution.
	IP netip.Addr
	// Phone is the user's phone number from Config.PhoneHeader or
	// Config.PhoneClaim.
	Phone string
}

// Resolver turns request attributes into a Region. It is safe for
// concurrent use; the GeoIP database behind it is swapped atomically on
// reload, and each lookup sees one database from start to end.
type Resolver struct {
	cfg     Config
	sources []string
	cat     *catalog
	logger  *slog.Logger

	db    atomic.Pointer[database]
	loads atomic.Uint64

	// Parsing a phone number costs tens of microseconds of regular
	// expressions and a header a few; users and CDNs repeat themselves.
	phoneCache  *regionCache[string]
	headerCache *regionCache[string]

	reloadMu sync.Mutex // serialises loads; guards lastErr and failed
	lastErr  error
	failed   fileID // the file that last failed to load, not retried until it changes

	watching  atomic.Bool
	closed    atomic.Bool
	closeOnce sync.Once
	done      chan struct{}
	wg        sync.WaitGroup
}

// New validates cfg and loads the GeoIP database, if one is configured; a
// database that cannot be read or verified is an error here, while on a
// later reload it only keeps the previous one in service. Call Watch to
// follow changes to the file. logger may be nil.
func New(cfg Config, logger *slog.Logger) (*Resolver, error) {
	if err := cfg.Validate(""); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cat, err := newCatalog(cfg.language())
	if err != nil {
		return nil, fmt.Errorf("language %q: %w", cfg.Language, err)
	}
	cfg.Sources = slices.Clone(cfg.Sources)
	r := &Resolver{
		cfg:     cfg,
		sources: cfg.sources(),
		cat:     cat,
		logger:  logger.With("component", "geo"),
		done:    make(chan struct{}),

		phoneCache:  newRegionCache[string](regionCacheLimit),
		headerCache: newRegionCache[string](regionCacheLimit),
	}
	if cfg.GeoIPPath != "" {
		db, _, err := loadDatabase(cfg.GeoIPPath)
		if err != nil {
			return nil, fmt.Errorf("load geoip_db: %w", err)
		}
		r.db.Store(db)
		r.loads.Add(1)
	}
	return r, nil
}

// Close stops Watch and releases the database; lookups then find nothing.
// It is safe to call more than once and always returns nil.
func (r *Resolver) Close() error {
	r.closeOnce.Do(func() {
		r.closed.Store(true)
		close(r.done)
	})
	r.wg.Wait()
	r.reloadMu.Lock()
	r.db.Store(nil)
	r.reloadMu.Unlock()
	return nil
}

// Sources returns the effective source order.
func (r *Resolver) Sources() []string { return slices.Clone(r.sources) }

// Resolve tries the sources in the configured order and returns the first
// region found. The header counts only when in.HeaderTrusted is set.
func (r *Resolver) Resolve(in Input) (Region, bool) {
	for _, s := range r.sources {
		var (
			reg Region
			ok  bool
		)
		switch s {
		case SourceHeader:
			if in.HeaderTrusted && in.HeaderValue != "" {
				reg, ok = r.LookupHeader(in.HeaderValue)
			}
		case SourceGeoIP:
			reg, ok = r.LookupIP(in.IP)
		case SourcePhone:
			if in.Phone != "" {
				reg, ok = r.LookupPhone(in.Phone)
			}
		}
		if ok {
			return reg, true
		}
	}
	return Region{}, false
}

// InputFrom reads the configured header, phone header and client address
// from req. claim, which may be nil, returns a verified JWT claim by name
// and is called only when the phone header is absent. trusted says the
// peer is a trusted proxy.
func (r *Resolver) InputFrom(req attr.Request, trusted bool, claim func(name string) (string, bool)) Input {
	in := Input{HeaderTrusted: trusted, IP: req.ClientIP()}
	if r.cfg.Header != "" && trusted {
		in.HeaderValue, _ = req.TrustedHeader(r.cfg.Header)
	}
	if r.cfg.PhoneHeader != "" {
		in.Phone, _ = req.Header(r.cfg.PhoneHeader)
	}
	if in.Phone == "" && r.cfg.PhoneClaim != "" && claim != nil {
		in.Phone, _ = claim(r.cfg.PhoneClaim)
	}
	return in
}

// Lazy resolves one request's region the first time it is asked for and
// remembers the answer, so a request whose rules never test the region
// costs nothing and one whose rules test it many times resolves it once.
// It belongs to one request and is not safe for concurrent use. The zero
// Lazy has no region.
type Lazy struct {
	r      *Resolver
	input  func() Input
	done   bool
	ok     bool
	region Region
}

// Lazy returns a Lazy for one request; input is called at most once.
func (r *Resolver) Lazy(input func() Input) Lazy {
	return Lazy{r: r, input: input}
}

// Region returns the request's region, resolving it on the first call.
func (l *Lazy) Region() (Region, bool) {
	if !l.done {
		l.done = true
		if l.r != nil && l.input != nil {
			l.region, l.ok = l.r.Resolve(l.input())
		}
	}
	return l.region, l.ok
}
