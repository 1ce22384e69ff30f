// Package config decodes graygate's process configuration (YAML) strictly,
// applies defaults and validates it, naming every problem by its path.
//
// The lifecycle follows Caddy's: decode (unknown keys are errors), then
// defaults, then Validate. YAML is first turned into its JSON equivalent so
// that one strict decoder (package strict) serves the config file, rule
// files and the admin API alike.
package config

import (
	"cmp"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"

	"github.com/graygate/graygate/internal/breaker"
	"github.com/graygate/graygate/internal/geo"
	"github.com/graygate/graygate/internal/identity"
	"github.com/graygate/graygate/internal/jsondur"
	"github.com/graygate/graygate/internal/limit"
	"github.com/graygate/graygate/internal/notify"
	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/storeurl"
	"github.com/graygate/graygate/internal/strict"
	"github.com/graygate/graygate/internal/tags"
	"github.com/graygate/graygate/internal/upstream"
)

// Config is the whole process configuration. Field comments are the
// reference documentation; README.md shows an example.
type Config struct {
	// Listen is the data-plane address (default ":8080").
	Listen string `json:"listen,omitempty"`
	// AdminListen is the admin API address (default "127.0.0.1:9080").
	AdminListen string `json:"admin_listen,omitempty"`
	// DataDir holds the embedded file store (default "./data").
	DataDir string `json:"data_dir,omitempty"`
	// DefaultUpstream serves requests that no rule claims and no route owns.
	DefaultUpstream string `json:"default_upstream,omitempty"`
	// PreserveHost keeps the client's Host header (default true).
	PreserveHost *bool `json:"preserve_host,omitempty"`
	// TrustedProxies are CIDRs or addresses whose X-Forwarded-For is believed.
	TrustedProxies []string `json:"trusted_proxies,omitempty"`
	// TrustGrayTag honours an inbound X-Gray-Tag, for east-west hops.
	TrustGrayTag bool `json:"trust_gray_tag,omitempty"`
	// Name names this gateway in notifications (default: the hostname).
	Name string `json:"name,omitempty"`
	// TLSListen is the data plane's TLS address, with HTTP/2 offered by
	// ALPN (empty: no TLS listener). It needs tls.certificates.
	TLSListen string `json:"tls_listen,omitempty"`
	// TLS holds the TLS listener's certificates, minimum version and mTLS
	// client CAs; the files are watched and reloaded when they change.
	TLS TLS `json:"tls,omitzero"`
	// H2C makes the cleartext listener accept HTTP/2 with prior knowledge
	// as well as HTTP/1.1.
	H2C bool `json:"h2c,omitempty"`

	// Breaker holds the circuit-breaker defaults for every gray rule; a
	// rule's own "breaker" fields override them.
	Breaker breaker.Config `json:"breaker,omitempty"`
	// Limits apply to requests no route owns, and are the defaults of
	// every route that does not set its own.
	Limits Limits `json:"limits,omitempty"`

	// Lifecycle configures graceful shutdown and socket handover.
	Lifecycle Lifecycle `json:"lifecycle,omitempty"`
	// Targeting configures where regions and user tags come from.
	Targeting Targeting `json:"targeting,omitempty"`
	// Experiments configures what every ab rule shares: the holdout.
	Experiments Experiments `json:"experiments,omitempty"`
	// Tracing exports OpenTelemetry spans over OTLP/HTTP (default: off).
	Tracing *Tracing `json:"tracing,omitempty"`

	Admin     Admin               `json:"admin,omitempty"`
	Identity  identity.Config     `json:"identity,omitempty"`
	Proxy     Proxy               `json:"proxy,omitempty"`
	AccessLog AccessLog           `json:"access_log,omitempty"`
	Store     Store               `json:"store,omitempty"`
	Upstreams map[string]Upstream `json:"upstreams,omitempty"`
	Routes    []Route             `json:"routes,omitempty"`
	// Notifications are webhooks that events (breaker transitions,
	// rollbacks, rollout steps, SRM) are POSTed to. They apply live on
	// reload.
	Notifications []Notification `json:"notifications,omitempty"`
	// Rules seed the store: a rule is created from here only if the store has
	// never held its key, so API edits are never overwritten by the file.
	Rules []json.RawMessage `json:"rules,omitempty"`
}

// TLS configures the TLS listener.
type TLS struct {
	// Certificates are chosen by SNI: the first whose names cover the
	// server name the client asks for, else the first.
	Certificates []Certificate `json:"certificates,omitempty"`
	// MinVersion is "1.2" (default) or "1.3".
	MinVersion string `json:"min_version,omitempty"`
	// ClientCAFile, when set, requires every client to present a
	// certificate signed by one of its CAs (mTLS).
	ClientCAFile string `json:"client_ca_file,omitempty"`
}

// Certificate is a certificate chain and its key, as PEM files.
type Certificate struct {
	CertFile string `json:"cert_file"`
	KeyFile  string `json:"key_file"`
}

// MinTLSVersion returns the tls package's constant for MinVersion.
func (t *TLS) MinTLSVersion() uint16 {
	if t.MinVersion == "1.3" {
		return tls.VersionTLS13
	}
	return tls.VersionTLS12
}

// Validate reports every problem under path: files that cannot be read,
// certificates and keys that do not match, a version other than 1.2 or
// 1.3.
func (t *TLS) Validate(path string) error {
	var errs []error
	add := func(p, format string, args ...any) { errs = append(errs, strict.Errorf(p, format, args...)) }
	for i, c := range t.Certificates {
		p := strict.Index(strict.Join(path, "certificates"), i)
		cert, cerr := os.ReadFile(c.CertFile)
		key, kerr := os.ReadFile(c.KeyFile)
		switch {
		case c.CertFile == "":
			add(p+".cert_file", "is required")
		case cerr != nil:
			add(p+".cert_file", "%v", cerr)
		}
		switch {
		case c.KeyFile == "":
			add(p+".key_file", "is required")
		case kerr != nil:
			add(p+".key_file", "%v", kerr)
		}
		if c.CertFile != "" && c.KeyFile != "" && cerr == nil && kerr == nil {
			if _, err := tls.X509KeyPair(cert, key); err != nil {
				add(p, "cert_file %s and key_file %s: %v", c.CertFile, c.KeyFile, err)
			}
		}
	}
	if t.MinVersion != "" && t.MinVersion != "1.2" && t.MinVersion != "1.3" {
		add(strict.Join(path, "min_version"), "must be \"1.2\" or \"1.3\", got %q", t.MinVersion)
	}
	if t.ClientCAFile != "" {
		if err := checkCAFile(t.ClientCAFile); err != nil {
			add(strict.Join(path, "client_ca_file"), "%v", err)
		}
	}
	return errors.Join(errs...)
}

// checkCAFile reads a PEM file of CA certificates.
func checkCAFile(path string) error {
	_, err := loadCAs(path)
	return err
}

// loadCAs reads a PEM file of CA certificates into a pool, with the
// file's contents.
func loadCAs(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// Admin configures the admin API.
type Admin struct {
	Tokens []Token `json:"tokens,omitempty"`
	// ReadTimeout bounds reading an admin request, its header and body
	// (default 60s); a client slower than that is disconnected.
	ReadTimeout *Duration `json:"read_timeout,omitempty"`
	// IdleTimeout closes an admin keep-alive connection that waits this
	// long for its next request (default 120s).
	IdleTimeout *Duration `json:"idle_timeout,omitempty"`
}

// Default admin server timeouts (Admin.ReadTimeout, Admin.IdleTimeout).
const (
	DefaultAdminReadTimeout = 60 * time.Second
	DefaultAdminIdleTimeout = 120 * time.Second
)

// TokenProblem says why no request could ever authenticate with the
// bearer token secret, or returns "": an Authorization header cannot
// carry whitespace around the token (the admin API trims it, as HTTP
// does) nor control characters, so such a token would lock its holder
// out without a word. The usual cause is the newline a secret file or
// volume ends with. The message never quotes the secret.
func TokenProblem(secret string) string {
	if strings.TrimSpace(secret) != secret {
		return "starts or ends with whitespace (a newline a secret file ends with?), which no Authorization header can carry: no request could authenticate with it; remove it"
	}
	for i := 0; i < len(secret); i++ {
		if c := secret[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return fmt.Sprintf("holds a control character (byte %d is 0x%02x), which no Authorization header can carry: no request could authenticate with it", i, c)
		}
	}
	return ""
}

// Token is one named bearer token.
type Token struct {
	Name string `json:"name"`
	// Token is the secret; TokenEnv names an environment variable holding it instead.
	Token    string `json:"token,omitempty"`
	TokenEnv string `json:"token_env,omitempty"`
	// Role is "admin" (read and write, the default), "viewer" (read only)
	// or "events" (may only post experiment events: for application
	// backends).
	Role string `json:"role,omitempty"`
}

// Notification is one webhook receiver of events.
type Notification struct {
	// Name identifies the receiver in metrics and logs (required, unique).
	Name string `json:"name"`
	// URL is where events are POSTed: http:// or https://. Chat webhooks
	// (Slack, Mattermost) show the body's "text" as it is.
	URL string `json:"url"`
	// Events are the event types sent (see notify.Types); empty or absent
	// means every type, including ones later versions add.
	Events []string `json:"events,omitempty"`
	// SecretEnv names an environment variable holding the HMAC secret;
	// when set, every body is signed in X-Graygate-Signature.
	SecretEnv string `json:"secret_env,omitempty"`
}

// Validate reports every problem under path. URLs are never quoted: a
// chat webhook's URL is its credential.
func (n *Notification) Validate(path string) error {
	var errs []error
	if n.Name == "" {
		errs = append(errs, strict.Errorf(strict.Join(path, "name"), "is required"))
	}
	if n.URL == "" {
		errs = append(errs, strict.Errorf(strict.Join(path, "url"), "is required"))
	} else if err := notify.CheckURL(n.URL); err != nil {
		errs = append(errs, strict.Errorf(strict.Join(path, "url"), "%v", err))
	}
	seen := map[string]int{}
	for i, e := range n.Events {
		p := strict.Index(strict.Join(path, "events"), i)
		if !notify.Known(e) {
			errs = append(errs, strict.Errorf(p, "unknown event %q (known: %s)", e, strings.Join(notify.Types(), ", ")))
		} else if j, dup := seen[e]; dup {
			errs = append(errs, strict.Errorf(p, "duplicates events[%d] %q", j, e))
		} else {
			seen[e] = i
		}
	}
	if n.SecretEnv != "" && os.Getenv(n.SecretEnv) == "" {
		errs = append(errs, strict.Errorf(strict.Join(path, "secret_env"), "environment variable %s is empty or unset", n.SecretEnv))
	}
	return errors.Join(errs...)
}

// Proxy holds data-plane timeouts and limits. Every stall is bounded: the
// five idle timeouts (read_timeout to client_idle_timeout) each have a
// default, and 0 is refused.
type Proxy struct {
	// DialTimeout bounds connecting to an instance (default 2s).
	DialTimeout Duration `json:"dial_timeout,omitempty"`
	// ResponseHeaderTimeout bounds the wait for an upstream's response
	// header once the request is sent (default 30s).
	ResponseHeaderTimeout Duration `json:"response_header_timeout,omitempty"`
	// IdleTimeout closes pooled upstream connections idle this long
	// (default 90s).
	IdleTimeout Duration `json:"idle_timeout,omitempty"`
	// ReadHeaderTimeout bounds a client's request line and header (default 10s).
	ReadHeaderTimeout Duration `json:"read_header_timeout,omitempty"`
	// ReadTimeout bounds how long an upstream may go silent between reads
	// of a response body (default 60s).
	ReadTimeout *Duration `json:"read_timeout,omitempty"`
	// WriteTimeout bounds how long an upstream may leave a write of a
	// request body waiting (default 60s).
	WriteTimeout *Duration `json:"write_timeout,omitempty"`
	// ClientReadTimeout bounds how long a client may go silent between
	// reads of its request body (default 60s); then 408.
	ClientReadTimeout *Duration `json:"client_read_timeout,omitempty"`
	// ClientWriteTimeout bounds how long a client may leave a write of a
	// response waiting (default 60s).
	ClientWriteTimeout *Duration `json:"client_write_timeout,omitempty"`
	// ClientIdleTimeout is how long a keep-alive client connection waits
	// for its next request (default 75s).
	ClientIdleTimeout *Duration `json:"client_idle_timeout,omitempty"`
	// MaxHeaderBytes bounds a request line plus header, and a trailer
	// section (default 16384, at most MaxHeaderBytes); larger gets 431.
	MaxHeaderBytes  int `json:"max_header_bytes,omitempty"`
	MaxConnsPerHost int `json:"max_conns_per_host,omitempty"`
	// MaxClientConnections caps the client connections open at once over
	// the data-plane listeners; a new one beyond it is closed at once, so
	// that clients cannot take every file descriptor from the admin API
	// and the upstream dials. 0 (the default) is (open-file limit - 256)
	// / 2, at least 64 (listener.DefaultMaxConns).
	MaxClientConnections int `json:"max_client_connections,omitempty"`
	// AllowUnderscoresInHeaders forwards request header fields whose
	// names contain "_" (default false: they are dropped, as nginx does).
	AllowUnderscoresInHeaders bool `json:"allow_underscores_in_headers,omitempty"`
	// Via adds "Via: 1.1 graygate" to forwarded requests and responses
	// (default true).
	Via *bool `json:"via,omitempty"`
}

// The bounds of proxy.max_header_bytes: every client connection gets a
// read buffer of that size.
const (
	MinHeaderBytes = 1 << 10
	MaxHeaderBytes = 1 << 20
)

// AccessLog configures the JSON access log.
type AccessLog struct {
	// Enabled turns it on (default false in serve, true in demo).
	Enabled bool `json:"enabled,omitempty"`
	// Path is "stdout" (default), "stderr" or a file path, appended to
	// and created if needed. It is checked whether the log is on or not:
	// a file that could not be opened (its directory missing or not
	// writable) is a validation error, at start and on reload alike.
	Path string `json:"path,omitempty"`
}

// Store configures the rule store.
type Store struct {
	// HistoryLimit is how many versions are kept per rule (default 100, at
	// most store.MaxHistoryLimit, 1000).
	HistoryLimit int `json:"history_limit,omitempty"`
	// URL selects a shared store, etcd://HOST:PORT[,HOST:PORT]/PREFIX
	// (etcds:// for TLS); empty is the embedded file store in data_dir.
	URL string `json:"url,omitempty"`
	// TLS, Username and PasswordEnv configure the etcd connection.
	TLS         storeurl.TLS `json:"tls,omitzero"`
	Username    string       `json:"username,omitempty"`
	PasswordEnv string       `json:"password_env,omitempty"`
}

// Etcd returns the etcd store config, or ok false for the file store.
func (s *Store) Etcd() (storeurl.Config, bool, error) {
	if s.URL == "" {
		return storeurl.Config{}, false, nil
	}
	c, err := storeurl.ParseURL(s.URL)
	if err != nil {
		return c, true, err
	}
	if s.TLS.On() {
		c.TLS = s.TLS
	}
	if s.Username != "" {
		c.Username, c.PasswordEnv = s.Username, s.PasswordEnv
	}
	return c, true, c.Validate()
}

// Lifecycle configures how a gateway stops and hands over its socket.
type Lifecycle struct {
	// DrainDelay is how long /readyz fails before the listeners stop
	// accepting, so that a load balancer takes the gateway out first.
	DrainDelay Duration `json:"drain_delay,omitempty"`
	// ShutdownTimeout bounds the wait for in-flight requests (default 30s).
	ShutdownTimeout Duration `json:"shutdown_timeout,omitempty"`
	// ReusePort binds the data-plane listener with SO_REUSEPORT, so that a
	// new graygate process can bind the same address before the old one
	// is told to stop (zero-downtime restarts).
	ReusePort bool `json:"reuse_port,omitempty"`
}

// Targeting configures the request attributes of seed 004's strategies.
type Targeting struct {
	// Region resolves region_in conditions: a trusted header, a GeoIP
	// database, a phone number.
	Region *geo.Config `json:"region,omitempty"`
	// Tags resolves tag conditions: a trusted header, a verified JWT, Redis.
	Tags *tags.Config `json:"tags,omitempty"`
	// TagTypes declares tag kinds ("number", "bool", "string") so that a
	// rule comparing a tag with a value of another type is refused when it
	// is stored.
	TagTypes map[string]string `json:"tag_types,omitempty"`
}

// Validate reports every problem under path.
func (t *Targeting) Validate(path string) error {
	var errs []error
	if t.Region != nil {
		errs = append(errs, t.Region.Validate(strict.Join(path, "region")))
	}
	if t.Tags != nil {
		c := *t.Tags
		c.Defaults()
		errs = append(errs, c.Validate(strict.Join(path, "tags")))
	}
	for k, v := range t.TagTypes {
		if v != "number" && v != "bool" && v != "string" {
			errs = append(errs, strict.Errorf(strict.Join(strict.Join(path, "tag_types"), k), "must be \"number\", \"bool\" or \"string\", got %q", v))
		}
	}
	return errors.Join(errs...)
}

// Experiments configures what every ab rule shares: the holdout, and how
// exposures and conversions are recorded (package experiment).
type Experiments struct {
	// Holdout keeps a stable share of users out of every experiment: a
	// held-out user is claimed by no ab rule and is served by the control
	// group of the ab rule that would have claimed them, as group
	// "holdout". Gray rules ignore it.
	Holdout *Holdout `json:"holdout,omitempty"`
	// ExposureLog, when set, is a file to which one JSON line is appended
	// per first exposure: {"ts","unit","experiment","group","rule_version",
	// "gateway"} (GrowthBook's trackingCallback, for warehouses).
	ExposureLog string `json:"exposure_log,omitempty"`
	// Store is where exposures and conversions are counted: empty for the
	// data dir, or redis://[user:password@]host:port/db (rediss:// for
	// TLS), shared by a fleet so that its results are fleet-wide.
	Store string `json:"store,omitempty"`
	// SRMAction is what a sample-ratio mismatch does besides a WARN log and
	// "ok": false in the results: "" (nothing more, the default) or
	// "freeze" (one-click rollback of the rule: everyone goes to control).
	SRMAction string `json:"srm_action,omitempty"`
	// ConversionWindow is how long after a unit's first exposure its
	// conversions count (default 72h, as GrowthBook's).
	ConversionWindow Duration `json:"conversion_window,omitempty"`
	// FlushInterval is how often queued exposures and conversions are
	// written to the store (default 1s): what a kill -9 can lose at most.
	FlushInterval Duration `json:"flush_interval,omitempty"`
	// MaxUnits bounds the (experiment, unit) pairs the data-dir store keeps
	// in memory (default 5,000,000); later first exposures are dropped and
	// counted.
	MaxUnits int `json:"max_units,omitempty"`
	// BufferEvents bounds the events held for a store that is unreachable
	// (default 100,000); older ones are dropped and counted.
	BufferEvents int `json:"buffer_events,omitempty"`
	// Gateway names this gateway in exposure log lines (default: the host
	// name and the data-plane port; see Config.ExposureGateway).
	Gateway string `json:"gateway,omitempty"`
}

// ExposureGateway is the name exposure log lines are labelled with:
// experiments.gateway, or the host name and the data-plane port. The
// default is not filled in by Defaults because it depends on the host; the
// reload table compares it through here (see Changed).
func (c *Config) ExposureGateway() string {
	if c.Experiments.Gateway != "" {
		return c.Experiments.Gateway
	}
	host, _ := os.Hostname()
	if _, port, err := net.SplitHostPort(c.Listen); err == nil && port != "" {
		return net.JoinHostPort(host, port)
	}
	return host
}

// Experiment defaults.
const (
	DefaultConversionWindow = 72 * time.Hour
	DefaultFlushInterval    = time.Second
	DefaultMaxUnits         = 5_000_000
	DefaultBufferEvents     = 100_000
	// SRMActionFreeze rolls an experiment with a sample-ratio mismatch back.
	SRMActionFreeze = "freeze"
)

// Holdout is the global holdout: users whose xxh64(salt + ":" + uid) %
// 10000 is below percent × 100 are held out.
type Holdout struct {
	// Percent is the share held out, 0..100 with up to two decimals.
	Percent float64 `json:"percent"`
	// Salt salts the holdout bucket (default "holdout"). Changing it
	// changes who is held out.
	Salt string `json:"salt,omitempty"`
}

// defaults fills the unset experiment fields.
func (e *Experiments) defaults() {
	if e.ConversionWindow == 0 {
		e.ConversionWindow = Duration(DefaultConversionWindow)
	}
	if e.FlushInterval == 0 {
		e.FlushInterval = Duration(DefaultFlushInterval)
	}
	if e.MaxUnits == 0 {
		e.MaxUnits = DefaultMaxUnits
	}
	if e.BufferEvents == 0 {
		e.BufferEvents = DefaultBufferEvents
	}
}

// Validate reports every problem under path.
func (e *Experiments) Validate(path string) error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, strict.Errorf(strict.Join(path, field), format, args...))
	}
	if e.Holdout != nil {
		switch h := e.Holdout.Percent * 100; {
		case math.IsNaN(e.Holdout.Percent) || e.Holdout.Percent < 0 || e.Holdout.Percent > 100:
			add("holdout.percent", "must be 0..100, got %v", e.Holdout.Percent)
		case math.Abs(h-math.Round(h)) > 1e-6:
			add("holdout.percent", "allows at most two decimals, got %v", e.Holdout.Percent)
		}
	}
	if e.Store != "" {
		if err := checkRedisURL(e.Store); err != nil {
			add("store", "%v", err)
		}
	}
	if e.SRMAction != "" && e.SRMAction != SRMActionFreeze {
		add("srm_action", "must be %q or empty, got %q", SRMActionFreeze, e.SRMAction)
	}
	if e.ConversionWindow.Std() < time.Second {
		add("conversion_window", "must be at least 1s, got %s", e.ConversionWindow.Std())
	}
	if f := e.FlushInterval.Std(); f < 10*time.Millisecond || f > time.Minute {
		add("flush_interval", "must be 10ms..1m, got %s", f)
	}
	if e.MaxUnits < 1 {
		add("max_units", "must be at least 1, got %d", e.MaxUnits)
	}
	if e.BufferEvents < 1 {
		add("buffer_events", "must be at least 1, got %d", e.BufferEvents)
	}
	return errors.Join(errs...)
}

// checkRedisURL accepts what experiments.store may name: a Redis URL that
// go-redis can dial.
func checkRedisURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
		return fmt.Errorf("must be redis://host:port/db or rediss://host:port/db, got %q", redactURL(s))
	}
	if _, err := redis.ParseURL(s); err != nil {
		return fmt.Errorf("invalid Redis URL %q: %v", redactURL(s), err)
	}
	return nil
}

// Tracing configures OpenTelemetry tracing: one server span per request,
// exported over OTLP/HTTP, with parent-based sampling. Without the section
// tracing is off and costs nothing.
type Tracing struct {
	// OTLPEndpoint is the collector's base URL, as the OTLP spec's
	// OTEL_EXPORTER_OTLP_ENDPOINT is: spans are posted to
	// <otlp_endpoint>/v1/traces ("http://127.0.0.1:4318").
	OTLPEndpoint string `json:"otlp_endpoint"`
	// SampleRatio is the share of traces graygate starts that are sampled,
	// 0..1 (default 0.01); a request with a traceparent follows its
	// parent's decision.
	SampleRatio *float64 `json:"sample_ratio,omitempty"`
	// ServiceName is the service.name resource attribute (default "graygate").
	ServiceName string `json:"service_name,omitempty"`
}

// DefaultSampleRatio is the sample ratio of a tracing section without one.
const DefaultSampleRatio = 0.01

// Validate reports every problem under path.
func (t *Tracing) Validate(path string) error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, strict.Errorf(strict.Join(path, field), format, args...))
	}
	if t.OTLPEndpoint == "" {
		add("otlp_endpoint", "is required: the collector's base URL, such as \"http://127.0.0.1:4318\" (spans go to <otlp_endpoint>/v1/traces)")
	} else if u, err := url.Parse(t.OTLPEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.Opaque != "" {
		add("otlp_endpoint", "must be an http:// or https:// URL with a host and no query, such as \"http://127.0.0.1:4318\", got %q", t.OTLPEndpoint)
	}
	if r := t.SampleRatio; r != nil && (math.IsNaN(*r) || *r < 0 || *r > 1) {
		add("sample_ratio", "must be 0..1, got %v", *r)
	}
	if strings.TrimSpace(t.ServiceName) == "" {
		add("service_name", "must not be empty")
	}
	return errors.Join(errs...)
}

// redactURL hides a password in a URL for error messages.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
			return u.String()
		}
	}
	return s
}

// Limits protect a route and its upstreams from slow, large or too many requests.
type Limits struct {
	// Timeout bounds the wait for the upstream's response header (default:
	// proxy.response_header_timeout).
	Timeout Duration `json:"timeout,omitempty"`
	// MaxBodyBytes answers 413 to larger request bodies (0: no limit).
	MaxBodyBytes int64 `json:"max_body_bytes,omitempty"`
	// FallbackBodyBytes is the largest request body buffered so that a
	// request that failed on a gray target can be replayed on stable
	// (default 65536).
	FallbackBodyBytes int64 `json:"fallback_body_bytes,omitempty"`
	// RateLimit is a token bucket for the route, or per identity; over it
	// requests get 429 with Retry-After.
	RateLimit *limit.Config `json:"rate_limit,omitempty"`
}

// Validate reports every problem under path.
func (l *Limits) Validate(path string) error {
	var errs []error
	if l.MaxBodyBytes < 0 {
		errs = append(errs, strict.Errorf(strict.Join(path, "max_body_bytes"), "must not be negative, got %d", l.MaxBodyBytes))
	}
	if l.FallbackBodyBytes < 0 {
		errs = append(errs, strict.Errorf(strict.Join(path, "fallback_body_bytes"), "must not be negative, got %d", l.FallbackBodyBytes))
	}
	if l.RateLimit != nil {
		errs = append(errs, l.RateLimit.Validate(strict.Join(path, "rate_limit")))
	}
	return errors.Join(errs...)
}

// Over returns l with unset fields taken from defaults.
func (l Limits) Over(defaults Limits) Limits {
	if l.Timeout == 0 {
		l.Timeout = defaults.Timeout
	}
	if l.MaxBodyBytes == 0 {
		l.MaxBodyBytes = defaults.MaxBodyBytes
	}
	if l.FallbackBodyBytes == 0 {
		l.FallbackBodyBytes = defaults.FallbackBodyBytes
	}
	if l.RateLimit == nil {
		l.RateLimit = defaults.RateLimit
	}
	return l
}

// Upstream is a named pool.
type Upstream struct {
	Instances []Instance `json:"instances,omitempty"`
	// Discover adds the instances registered in etcd under this service
	// name (graygate register, or any client writing the same keys); it
	// needs --store etcd://.
	Discover string `json:"discover,omitempty"`
	// Config holds balancer, version_header, passive_health and
	// active_health.
	upstream.Config
	// MaxConcurrent caps requests in flight to the pool (0: no cap); over
	// it requests get 503.
	MaxConcurrent int `json:"max_concurrent,omitempty"`
	// Protocol is how the gateway speaks to the instances: "http1"
	// (default; TLS for https:// addresses), "h2c" (HTTP/2 in clear, with
	// prior knowledge) or "h2" (HTTP/2 over TLS). gRPC needs h2c or h2.
	Protocol string `json:"protocol,omitempty"`
	// CAFile holds the CAs that sign an h2 upstream's certificates
	// (default: the system's roots).
	CAFile string `json:"ca_file,omitempty"`
	// ServerName is the name an h2 upstream's certificate must have
	// (default: the instance's host).
	ServerName string `json:"server_name,omitempty"`
}

// Instance is one static upstream instance.
type Instance struct {
	// Addr is host:port or http(s)://host[:port].
	Addr     string            `json:"addr"`
	Weight   int               `json:"weight,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Route owns a host and path prefix, with its own default upstream and rules.
type Route struct {
	Name       string `json:"name"`
	Host       string `json:"host,omitempty"`
	PathPrefix string `json:"path_prefix,omitempty"`
	// Upstream serves what no rule claims (default: the global default upstream).
	Upstream     string `json:"upstream,omitempty"`
	PreserveHost *bool  `json:"preserve_host,omitempty"`
	// VersionHeader turns on seed 003's routing for the route: the named
	// request header (true means "version") picks the target pool's
	// instances by their version metadata, falling back to all healthy ones.
	VersionHeader upstream.VersionHeader `json:"version_header,omitempty"`
	// Limits (timeout, max_body_bytes, fallback_body_bytes, rate_limit)
	// override the top-level limits for this route.
	Limits
}

// Duration is a time.Duration written as a Go duration string ("500ms",
// "30s"); see jsondur.
type Duration = jsondur.Duration

// StdOf returns *d as a time.Duration, or 0 (the default) when d is unset.
func StdOf(d *Duration) time.Duration {
	if d == nil {
		return 0
	}
	return time.Duration(*d)
}

// Load reads, decodes and validates a config file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w", path, err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes YAML (or JSON, which is YAML) strictly, applies defaults and
// validates. Every problem is reported with its path.
func Parse(data []byte) (*Config, error) {
	var generic any
	if err := yaml.Unmarshal(data, &generic); err != nil {
		var doc yaml.Node
		if yaml.Unmarshal(data, &doc) == nil {
			if dups := duplicateYAMLKeys(&doc, ""); len(dups) > 0 {
				return nil, errors.Join(dups...)
			}
		}
		return nil, &strict.FieldError{Message: "invalid YAML: " + err.Error()}
	}
	if generic == nil {
		generic = map[string]any{}
	}
	generic, err := jsonable(generic, "")
	if err != nil {
		return nil, err
	}
	js, err := json.Marshal(generic)
	if err != nil {
		return nil, fmt.Errorf("convert YAML: %w", err)
	}
	var c Config
	derr := strict.Decode(js, &c)
	c.Defaults()
	if err := strict.Merge(derr, c.Validate()); err != nil {
		return nil, err
	}
	return &c, nil
}

// duplicateYAMLKeys names, by path, every key given twice in one mapping
// of n, as the admin API names a JSON member given twice. yaml.v3 refuses
// such a document with only "line N: mapping key "x" already defined at
// line M", which does not say which section's key it is. Decoding into a
// yaml.Node does not check for duplicates, so this walks that tree.
func duplicateYAMLKeys(n *yaml.Node, path string) []error {
	var errs []error
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			errs = append(errs, duplicateYAMLKeys(c, path)...)
		}
	case yaml.MappingNode:
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
				continue
			}
			p := strict.Join(path, k.Value)
			if line, dup := seen[k.Value]; dup {
				errs = append(errs, strict.Errorf(p, "duplicate key: %q is given more than once in the same mapping (lines %d and %d)", k.Value, line, k.Line))
			} else {
				seen[k.Value] = k.Line
			}
			errs = append(errs, duplicateYAMLKeys(v, p)...)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			errs = append(errs, duplicateYAMLKeys(c, strict.Index(path, i))...)
		}
	}
	return errs
}

// jsonable converts YAML's generic values into JSON-marshalable ones.
func jsonable(v any, path string) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			j, err := jsonable(e, strict.Join(path, k))
			if err != nil {
				return nil, err
			}
			x[k] = j
		}
		return x, nil
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			ks, ok := k.(string)
			if !ok {
				return nil, strict.Errorf(path, "keys must be strings, got %v", k)
			}
			j, err := jsonable(e, strict.Join(path, ks))
			if err != nil {
				return nil, err
			}
			out[ks] = j
		}
		return out, nil
	case []any:
		for i, e := range x {
			j, err := jsonable(e, strict.Index(path, i))
			if err != nil {
				return nil, err
			}
			x[i] = j
		}
		return x, nil
	case time.Time:
		return x.Format(time.RFC3339Nano), nil
	case float64:
		// YAML has .inf and .nan; JSON, and so every field, has no such
		// number.
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return nil, strict.Errorf(path, "expected a finite number, got %v", x)
		}
	}
	return v, nil
}

// Defaults fills in every unset field with its default.
func (c *Config) Defaults() {
	if c.Listen == "" {
		c.Listen = ":8080"
	}
	if c.AdminListen == "" {
		c.AdminListen = "127.0.0.1:9080"
	}
	if c.DataDir == "" {
		c.DataDir = "./data"
	}
	if c.PreserveHost == nil {
		t := true
		c.PreserveHost = &t
	}
	if c.Lifecycle.ShutdownTimeout == 0 {
		c.Lifecycle.ShutdownTimeout = Duration(30 * time.Second)
	}
	if c.Store.HistoryLimit == 0 {
		c.Store.HistoryLimit = 100
	}
	c.Experiments.defaults()
	if c.AccessLog.Path == "" {
		c.AccessLog.Path = "stdout"
	}
	if t := c.Tracing; t != nil {
		if t.SampleRatio == nil {
			r := DefaultSampleRatio
			t.SampleRatio = &r
		}
		if t.ServiceName == "" {
			t.ServiceName = "graygate"
		}
	}
	if c.Admin.ReadTimeout == nil {
		d := Duration(DefaultAdminReadTimeout)
		c.Admin.ReadTimeout = &d
	}
	if c.Admin.IdleTimeout == nil {
		d := Duration(DefaultAdminIdleTimeout)
		c.Admin.IdleTimeout = &d
	}
	for i := range c.Admin.Tokens {
		if c.Admin.Tokens[i].Role == "" {
			c.Admin.Tokens[i].Role = "admin"
		}
	}
}

// listenAddr checks a listen address as net.Listen will take it: host:port
// or :port, the port a number up to 65535 or a service name the system
// knows ("http"), so that a typo is a validation error naming the field,
// not a failure to start.
func listenAddr(v string) error {
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		return fmt.Errorf("must be host:port or :port, got %q", v)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("port %q in %q is not a number from 0 to 65535 or a known service name", port, v)
	}
	return nil
}

// Validate reports every problem, each named by its path.
func (c *Config) Validate() error {
	var errs []error
	add := func(path, format string, args ...any) { errs = append(errs, strict.Errorf(path, format, args...)) }
	for _, f := range []struct{ path, v string }{{"listen", c.Listen}, {"admin_listen", c.AdminListen}, {"tls_listen", c.TLSListen}} {
		if f.v == "" && f.path == "tls_listen" {
			continue
		}
		if err := listenAddr(f.v); err != nil {
			add(f.path, "%v", err)
		}
	}
	if c.TLSListen != "" {
		if len(c.TLS.Certificates) == 0 {
			add("tls.certificates", "needs at least one certificate when tls_listen is set")
		}
	} else if len(c.TLS.Certificates) > 0 || c.TLS.ClientCAFile != "" {
		add("tls", "is set but tls_listen is not: no listener would use it")
	}
	if err := c.TLS.Validate("tls"); err != nil {
		errs = append(errs, err)
	}
	if c.DefaultUpstream != "" {
		if err := c.checkTarget(c.DefaultUpstream); err != nil {
			add("default_upstream", "%v", err)
		}
	}
	for i, p := range c.TrustedProxies {
		if _, err := ParsePrefix(p); err != nil {
			add(strict.Index("trusted_proxies", i), "%v", err)
		}
	}
	names, secrets := map[string]int{}, map[string]int{}
	for i, t := range c.Admin.Tokens {
		p := strict.Index("admin.tokens", i)
		if t.Name == "" {
			add(p+".name", "is required")
		} else if j, dup := names[t.Name]; dup {
			add(p+".name", "duplicates admin.tokens[%d].name %q", j, t.Name)
		} else {
			names[t.Name] = i
		}
		if (t.Token == "") == (t.TokenEnv == "") {
			add(p, "set exactly one of token or token_env")
		}
		if t.TokenEnv != "" && os.Getenv(t.TokenEnv) == "" {
			add(p+".token_env", "environment variable %s is empty or unset", t.TokenEnv)
		}
		if t.Token != "" && t.TokenEnv == "" {
			if msg := TokenProblem(t.Token); msg != "" {
				add(p+".token", "%s", msg)
			}
		} else if v := os.Getenv(t.TokenEnv); t.TokenEnv != "" && v != "" {
			if msg := TokenProblem(v); msg != "" {
				add(p+".token_env", "environment variable %s %s", t.TokenEnv, msg)
			}
		}
		if t.Role != "admin" && t.Role != "viewer" && t.Role != "events" {
			add(p+".role", "must be \"admin\", \"viewer\" or \"events\", got %q", t.Role)
		}
		// Two entries with one secret: a request would carry the first
		// one's name and role, and the second would never apply. The
		// secret itself is not echoed.
		if v := cmp.Or(t.Token, os.Getenv(t.TokenEnv)); v != "" {
			if j, dup := secrets[v]; dup {
				add(p, "has the same secret as admin.tokens[%d] (%q); each token must be distinct", j, c.Admin.Tokens[j].Name)
			} else {
				secrets[v] = i
			}
		}
	}
	if err := c.Identity.Validate("identity"); err != nil {
		errs = append(errs, err)
	}
	if n := c.Proxy.MaxHeaderBytes; n != 0 && (n < MinHeaderBytes || n > MaxHeaderBytes) {
		// Each client connection gets a read buffer of this size.
		add("proxy.max_header_bytes", "must be %d..%d (1 KiB..1 MiB; 0 is the default, 16384), got %d", MinHeaderBytes, MaxHeaderBytes, n)
	}
	if c.Proxy.MaxConnsPerHost < 0 {
		add("proxy.max_conns_per_host", "must not be negative, got %d", c.Proxy.MaxConnsPerHost)
	}
	if c.Proxy.MaxClientConnections < 0 {
		add("proxy.max_client_connections", "must not be negative (0 is the default, from the open-file limit), got %d", c.Proxy.MaxClientConnections)
	}
	for _, f := range []struct {
		path string
		d    *Duration
	}{
		{"proxy.read_timeout", c.Proxy.ReadTimeout}, {"proxy.write_timeout", c.Proxy.WriteTimeout},
		{"proxy.client_read_timeout", c.Proxy.ClientReadTimeout}, {"proxy.client_write_timeout", c.Proxy.ClientWriteTimeout},
		{"proxy.client_idle_timeout", c.Proxy.ClientIdleTimeout},
		{"admin.read_timeout", c.Admin.ReadTimeout}, {"admin.idle_timeout", c.Admin.IdleTimeout},
	} {
		if f.d != nil && *f.d == 0 {
			add(f.path, "must be a positive duration such as \"60s\"; 0 would leave a stall unbounded")
		}
	}
	if err := c.Breaker.Validate("breaker"); err != nil {
		errs = append(errs, err)
	}
	if err := c.Targeting.Validate("targeting"); err != nil {
		errs = append(errs, err)
	}
	if err := c.Experiments.Validate("experiments"); err != nil {
		errs = append(errs, err)
	}
	if err := c.Limits.Validate("limits"); err != nil {
		errs = append(errs, err)
	}
	if c.Tracing != nil {
		errs = append(errs, c.Tracing.Validate("tracing"))
	}
	if _, _, err := c.Store.Etcd(); err != nil {
		errs = append(errs, strict.Prefix("store.url", err))
	}
	// Whether the log is on or not: --access-log, or a later reload, can
	// turn it on, and the path should fail here, not then.
	if err := checkLogPath(c.AccessLog.Path); err != nil {
		add("access_log.path", "cannot open %q for appending: %v", c.AccessLog.Path, err)
	}
	if n := c.Store.HistoryLimit; n < 1 || n > store.MaxHistoryLimit {
		add("store.history_limit", "must be 1..%d (versions kept per rule; 0 or unset means 100), got %d", store.MaxHistoryLimit, n)
	}
	for name, u := range c.Upstreams {
		p := strict.Join("upstreams", name)
		if name == "" {
			add("upstreams", "an upstream name must not be empty")
		}
		if len(u.Instances) == 0 && u.Discover == "" {
			add(p+".instances", "needs at least one instance (or discover: SERVICE)")
		}
		if strings.ContainsAny(name, "@=,") {
			add(p, "an upstream name must not contain '@', '=' or ','")
		}
		if err := u.Config.Validate(p); err != nil {
			errs = append(errs, err)
		}
		if u.MaxConcurrent < 0 {
			add(p+".max_concurrent", "must not be negative, got %d", u.MaxConcurrent)
		}
		proto, perr := upstream.ParseProtocol(u.Protocol)
		if perr != nil {
			add(p+".protocol", "%v", perr)
		}
		if proto != upstream.H2 {
			if u.CAFile != "" {
				add(p+".ca_file", "only applies to protocol: h2, got protocol %q", proto)
			}
			if u.ServerName != "" {
				add(p+".server_name", "only applies to protocol: h2, got protocol %q", proto)
			}
		} else if u.CAFile != "" {
			if err := checkCAFile(u.CAFile); err != nil {
				add(p+".ca_file", "%v", err)
			}
		}
		for i, in := range u.Instances {
			ip := strict.Index(p+".instances", i)
			inst, err := upstream.ParseAddress(in.Addr)
			if err != nil {
				add(ip+".addr", "%v", err)
			} else if perr == nil && proto == upstream.H2C && inst.TLS {
				add(ip+".addr", "is https but the upstream's protocol is h2c (HTTP/2 in clear): use host:port, or protocol: h2")
			}
			if in.Weight < 0 {
				add(ip+".weight", "must not be negative, got %d", in.Weight)
			}
		}
	}
	nnames := map[string]int{}
	for i, n := range c.Notifications {
		p := strict.Index("notifications", i)
		errs = append(errs, n.Validate(p))
		if j, dup := nnames[n.Name]; dup && n.Name != "" {
			add(p+".name", "duplicates notifications[%d].name %q", j, n.Name)
		} else {
			nnames[n.Name] = i
		}
	}
	rnames := map[string]int{}
	type hostPrefix struct{ host, prefix string }
	owners := map[hostPrefix]int{}
	for i, r := range c.Routes {
		p := strict.Index("routes", i)
		if r.Name == "" {
			add(p+".name", "is required")
		} else if j, dup := rnames[r.Name]; dup {
			add(p+".name", "duplicates routes[%d].name %q", j, r.Name)
		} else {
			rnames[r.Name] = i
		}
		if err := checkRouteHost(r.Host); err != nil {
			add(p+".host", "%v", err)
		}
		if r.PathPrefix != "" && r.PathPrefix[0] != '/' {
			add(p+".path_prefix", "must start with \"/\", got %q", r.PathPrefix)
		}
		// The router takes the first route of a host and prefix: a second
		// one would never serve anything (nginx refuses such a duplicate
		// location too).
		hp := hostPrefix{strings.ToLower(r.Host), r.PathPrefix}
		if hp.prefix == "" {
			hp.prefix = "/"
		}
		if j, dup := owners[hp]; dup {
			add(p, "has the host %q and path_prefix %q of routes[%d] (%q), so it would never be used", r.Host, hp.prefix, j, c.Routes[j].Name)
		} else {
			owners[hp] = i
		}
		if r.Upstream != "" {
			if err := c.checkTarget(r.Upstream); err != nil {
				add(p+".upstream", "%v", err)
			}
		}
		if err := r.Limits.Validate(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkRouteHost refuses a route host that no request's Host can equal:
// the router compares the Host without its port, case-insensitively, and
// exactly (no wildcards), so a host with a port, a scheme or a path, an
// IPv6 address without brackets, or a name that is not ASCII (a request
// carries the punycode form) would silently never match.
func checkRouteHost(h string) error {
	if h == "" {
		return nil // any host
	}
	if strings.Contains(h, "://") {
		return fmt.Errorf("must be a host name without a scheme, got %q", h)
	}
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end > 0 && net.ParseIP(h[1:end]) != nil {
			if end == len(h)-1 {
				return nil
			}
			if h[end+1] == ':' {
				return fmt.Errorf("must not have a port (a request's port is not compared), got %q: use %q", h, h[:end+1])
			}
		}
		return fmt.Errorf("must be a host name, an IPv4 address or a bracketed IPv6 address, got %q", h)
	}
	if ip := net.ParseIP(h); ip != nil && strings.Contains(h, ":") {
		return fmt.Errorf("an IPv6 address must be in brackets, as in a Host header, got %q: use %q", h, "["+h+"]")
	}
	if name, port, err := net.SplitHostPort(h); err == nil && port != "" {
		return fmt.Errorf("must not have a port (a request's port is not compared), got %q: use %q", h, name)
	}
	if strings.Contains(h, "*") {
		return fmt.Errorf("wildcards are not supported (a host is matched exactly), got %q", h)
	}
	for i := 0; i < len(h); i++ {
		b := h[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '.' || b == '-' || b == '_') {
			return fmt.Errorf("must be a host name (ASCII letters, digits, \".\", \"-\"; an international name in its punycode form), got %q", h)
		}
	}
	return nil
}

func (c *Config) checkTarget(t string) error {
	if _, ok := c.Upstreams[t]; ok {
		return nil
	}
	if s, ok, err := upstream.ParseSubset(t); err != nil {
		return err
	} else if ok {
		if _, ok := c.Upstreams[s.Pool]; !ok {
			return fmt.Errorf("subset %q: no upstream named %q", t, s.Pool)
		}
		return nil
	}
	if _, err := upstream.ParseAddress(t); err != nil {
		return fmt.Errorf("%q is neither a configured upstream nor an address: %v", t, err)
	}
	return nil
}

// weighted reports whether an instance has a weight other than 1.
func weighted(ins []Instance) bool {
	for _, in := range ins {
		if in.Weight > 1 {
			return true
		}
	}
	return false
}

// transport sets the pool options' protocol and, for h2, its TLS
// settings: the CAs of ca_file and the server name; TLSKey names them, so
// that pools with the same settings share connections. They are options,
// so that active probes speak the pool's protocol from the first one.
func (u *Upstream) transport(p *upstream.PoolOptions) error {
	proto, err := upstream.ParseProtocol(u.Protocol)
	if err != nil {
		return fmt.Errorf("protocol: %w", err)
	}
	p.Protocol = proto
	if proto != upstream.H2 {
		return nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: u.ServerName}
	key := "sni=" + u.ServerName
	if u.CAFile != "" {
		b, err := os.ReadFile(u.CAFile)
		if err != nil {
			return fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return fmt.Errorf("ca_file: %s holds no PEM certificate", u.CAFile)
		}
		conf.RootCAs = pool
		sum := sha256.Sum256(b)
		key += ";ca=" + hex.EncodeToString(sum[:])
	}
	p.TLS, p.TLSKey = conf, key
	return nil
}

// ParsePrefix parses a CIDR or a single address as a prefix.
func ParsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("invalid CIDR or address %q", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// Pools builds the named upstream pools.
// h keeps per-instance health across rebuilds; nil builds pools without
// active probes (for validation).
//
// discovered holds the instances found by discovery, by service name; they
// join the static instances of every upstream that discovers that service.
func (c *Config) Pools(h *upstream.Health, discovered map[string][]Instance) (map[string]*upstream.Pool, error) {
	out := make(map[string]*upstream.Pool, len(c.Upstreams))
	for name, u := range c.Upstreams {
		var ins []*upstream.Instance
		all := u.Instances
		if u.Discover != "" {
			all = append(append([]Instance(nil), all...), discovered[u.Discover]...)
		}
		for _, in := range all {
			i, err := upstream.ParseAddress(in.Addr)
			if err != nil {
				continue // a discovered instance with a bad address; static ones were validated
			}
			i.Weight = in.Weight
			i.Metadata = in.Metadata
			ins = append(ins, i)
		}
		opts := u.Config.Options(h)
		if opts.Balancer == "" && weighted(u.Instances) {
			// As nginx's upstream does by default, weights count: a pool
			// that gives its instances weights and names no balancer is
			// balanced by them.
			opts.Balancer = upstream.Weighted
		}
		err := u.transport(&opts)
		var p *upstream.Pool
		if err == nil {
			p, err = upstream.NewPoolWith(name, ins, opts)
		}
		if err != nil {
			for _, built := range out {
				built.Close()
			}
			return nil, fmt.Errorf("upstreams.%s: %w", name, err)
		}
		out[name] = p
	}
	return out, nil
}
