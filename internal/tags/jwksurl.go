package tags

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// maxJWKSBytes bounds a fetched key set; real ones are a few KiB.
const maxJWKSBytes = 1 << 20

// remoteKeys is a JSON Web Key Set fetched from a URL (an identity
// provider's jwks_uri, RFC 8414 §2) and cached. It is refreshed every
// refresh interval and when a token names a kid it does not hold, which is
// how a rotated signing key is picked up; two fetches are at least
// minRefresh apart, however many unknown kids arrive, so a flood of forged
// kids cannot turn the gateway into a load generator against the identity
// provider. A failed fetch (the endpoint down, a bad answer) keeps the last
// good set. Fetches run on their own goroutine: a request never waits for
// one. It is safe for concurrent use.
type remoteKeys struct {
	url        string
	client     *http.Client
	timeout    time.Duration
	refresh    time.Duration
	minRefresh time.Duration
	now        func() time.Time
	log        *slog.Logger

	keys    atomic.Pointer[map[string]jwkKey] // the last good set; nil before the first
	nextDue atomic.Int64                      // unix nanoseconds of the next periodic refresh

	mu          sync.Mutex
	lastAttempt time.Time // when the last fetch started
	fetching    bool

	ctx    context.Context // ends with close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// jwksClient builds the HTTP client for jwks_url: its own transport (never
// http.DefaultTransport), TLS 1.2 or later, verified against caFile's CAs
// or the system roots, bounded by timeout.
func jwksClient(caFile string, timeout time.Duration) (*http.Client, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("jwt: read jwks_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("jwt: jwks_ca_file %s holds no PEM certificate", caFile)
		}
		tc.RootCAs = pool
	}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			TLSClientConfig:     tc,
			TLSHandshakeTimeout: timeout,
			MaxIdleConns:        2,
			IdleConnTimeout:     time.Minute,
		},
	}, nil
}

func newRemoteKeys(cfg JWTConfig, client *http.Client, now func() time.Time, log *slog.Logger) *remoteKeys {
	r := &remoteKeys{
		url:        cfg.JWKSURL,
		client:     client,
		timeout:    cfg.JWKSTimeout.Std(),
		refresh:    cfg.JWKSRefreshInterval.Std(),
		minRefresh: cfg.JWKSMinRefreshInterval.Std(),
		now:        now,
		log:        log.With("jwks_url", cfg.JWKSURL),
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r
}

// start fetches the set once and waits for the answer, so that a gateway
// starts with keys when the endpoint is up. When it is not, the gateway
// starts anyway (an identity provider's outage must not stop the fleet)
// with no keys: tokens that name a kid are refused as unknown, and the set
// is fetched again within minRefresh.
func (r *remoteKeys) start() {
	r.mu.Lock()
	r.lastAttempt = r.now()
	r.fetching = true
	r.mu.Unlock()
	r.wg.Add(1)
	r.fetch()
}

// lookup returns the key kid names. An unknown kid asks for a refresh.
func (r *remoteKeys) lookup(kid string) (jwkKey, bool) {
	if m := r.keys.Load(); m != nil {
		if k, ok := (*m)[kid]; ok {
			return k, true
		}
	}
	r.refreshSoon()
	return jwkKey{}, false
}

// tick starts the periodic refresh when it is due; Verify calls it.
func (r *remoteKeys) tick(now time.Time) {
	if now.UnixNano() >= r.nextDue.Load() {
		r.refreshSoon()
	}
}

// refreshSoon starts a fetch unless one is running or the last started
// less than minRefresh ago.
func (r *remoteKeys) refreshSoon() {
	r.mu.Lock()
	now := r.now()
	if r.fetching || now.Sub(r.lastAttempt) < r.minRefresh || r.ctx.Err() != nil {
		r.mu.Unlock()
		return
	}
	r.fetching, r.lastAttempt = true, now
	r.wg.Add(1)
	r.mu.Unlock()
	go r.fetch()
}

// fetch gets the set once and, if it is good, makes it current. The
// caller has set fetching and added to wg.
func (r *remoteKeys) fetch() {
	defer r.wg.Done()
	keys, err := r.get()
	r.mu.Lock()
	r.fetching = false
	r.mu.Unlock()
	if err != nil {
		if r.keys.Load() == nil {
			r.log.Error("JWKS fetch failed and no key set is held: tokens with a kid are refused", "err", err)
		} else {
			r.log.Warn("JWKS fetch failed; the last good key set keeps verifying", "err", err)
		}
		// Try again after minRefresh, not after a whole refresh interval.
		r.nextDue.Store(r.now().Add(r.minRefresh).UnixNano())
		return
	}
	r.keys.Store(&keys)
	r.nextDue.Store(r.now().Add(r.refresh).UnixNano())
	r.log.Debug("JWKS fetched", "keys", len(keys))
}

func (r *remoteKeys) get() (map[string]jwkKey, error) {
	ctx, cancel := context.WithTimeout(r.ctx, r.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	if err != nil {
		return nil, fmt.Errorf("jwks_url: %w", err)
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch JWKS: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch JWKS: %s answered %s", r.url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("fetch JWKS: read the body: %w", err)
	}
	if len(body) > maxJWKSBytes {
		return nil, fmt.Errorf("fetch JWKS: the key set is over %d bytes", maxJWKSBytes)
	}
	keys, err := parseJWKS(body)
	if err != nil {
		return nil, fmt.Errorf("JWKS from %s: %w", r.url, err)
	}
	return keys, nil
}

// close stops a fetch in flight and waits for it.
func (r *remoteKeys) close() {
	r.cancel()
	r.wg.Wait()
	r.client.CloseIdleConnections()
}
