// Package storeurl parses and validates where a shared rule store lives:
// the store URL (etcd://HOST:PORT[,HOST:PORT]/PREFIX), its TLS files and its
// authentication settings. It holds no client, so that the config package
// can validate a config without pulling in the etcd client and gRPC;
// package etcdstore connects with what it describes.
package storeurl

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// Config says which etcd cluster and which part of its keyspace hold the
// rules. ParseURL builds one from a store URL; the TLS and auth fields come
// from the config file. Field comments are the user documentation.
type Config struct {
	// Endpoints are the client addresses of the etcd members, as
	// host:port. The client balances over them and fails over between
	// them.
	Endpoints []string `json:"endpoints"`
	// Prefix is the root of graygate's keys, such as "/graygate/prod/".
	// Gateways that share a prefix share their rules; see the package
	// documentation for what lives under it.
	Prefix string `json:"prefix"`
	// TLS secures the connection; the zero value is plain HTTP/2.
	TLS TLS `json:"tls,omitzero"`
	// Username and PasswordEnv turn on etcd authentication. The password
	// is read from the environment variable PasswordEnv names, so that it
	// never sits in a config file.
	Username    string `json:"username,omitempty"`
	PasswordEnv string `json:"password_env,omitempty"`
}

// TLS configures the client side of TLS. Setting any file turns TLS on.
type TLS struct {
	// Enabled turns TLS on even when no file is set: the server is then
	// verified against the system roots.
	Enabled bool `json:"enabled,omitempty"`
	// CAFile is a PEM bundle of the CAs that sign the etcd server
	// certificates (default: the system roots).
	CAFile string `json:"ca_file,omitempty"`
	// CertFile and KeyFile are the PEM client certificate and key, for
	// clusters that require client certificates. Set both or neither.
	CertFile string `json:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty"`
	// ServerName overrides the name the server certificate is checked
	// against (default: the endpoint host).
	ServerName string `json:"server_name,omitempty"`
}

// On reports whether TLS is to be used.
func (t TLS) On() bool {
	return t.Enabled || t.CAFile != "" || t.CertFile != "" || t.KeyFile != ""
}

// Scheme is the URL scheme that selects this store.
const Scheme = "etcd"

// errCredentials refuses a store URL with credentials in it.
var errCredentials = errors.New("endpoints: credentials do not belong in the URL (it is not repeated here, so that its password is not either); use username and password_env")

// ParseURL parses a store URL of the form
//
//	etcd://HOST:PORT[,HOST:PORT...]/PREFIX
//
// into a Config with Endpoints and a normalized Prefix ("/PREFIX/"). The
// scheme etcds:// is the same with TLS on. Each problem is reported with the
// part of the URL it concerns (scheme, endpoints[i], prefix), all of them
// joined, so a caller can prefix its own config path.
//
// A URL with credentials in it (an "@" anywhere: no part of a valid store
// URL holds one) is refused with that one error and without repeating any
// of the URL, which would put the password in a log or an API answer;
// a query is repeated with its values masked for the same reason.
func ParseURL(s string) (Config, error) {
	var cfg Config
	if strings.Contains(s, "@") {
		return cfg, errCredentials
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return cfg, fmt.Errorf("scheme: want %s://HOST:PORT[,HOST:PORT]/PREFIX, got %q", Scheme, s)
	}
	switch strings.ToLower(scheme) {
	case Scheme:
	case Scheme + "s":
		cfg.TLS.Enabled = true
	default:
		return cfg, fmt.Errorf("scheme: must be %q or %q, got %q", Scheme, Scheme+"s", scheme)
	}
	var errs []error
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		errs = append(errs, fmt.Errorf("url: query and fragment are not supported (etcd options are config keys), got %q", maskQuery(rest[i:])))
		rest = rest[:i]
	}
	hosts, path, _ := strings.Cut(rest, "/")
	if hosts == "" {
		errs = append(errs, errors.New("endpoints: at least one HOST:PORT is required"))
	} else {
		cfg.Endpoints = strings.Split(hosts, ",")
	}
	cfg.Prefix = "/" + path
	if path == "" {
		errs = append(errs, errors.New("prefix: must not be empty: name the keyspace, as in etcd://127.0.0.1:2379/graygate"))
	}
	if err := cfg.validateAddrs(); err != nil {
		errs = append(errs, err)
	}
	if path != "" {
		if err := ValidPrefix(cfg.Prefix); err != nil {
			errs = append(errs, err)
		}
		cfg.Prefix = NormalizePrefix(cfg.Prefix)
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// maskQuery returns a URL's "?query#fragment" with every value replaced
// by "…": the names say what was given, and a value may be a secret.
func maskQuery(qf string) string {
	var b strings.Builder
	query, frag, hasFrag := strings.Cut(qf, "#")
	if q, ok := strings.CutPrefix(query, "?"); ok {
		b.WriteByte('?')
		for i, kv := range strings.Split(q, "&") {
			if i > 0 {
				b.WriteByte('&')
			}
			k, _, hasValue := strings.Cut(kv, "=")
			b.WriteString(k)
			if hasValue {
				b.WriteString("=…")
			}
		}
	}
	if hasFrag {
		b.WriteByte('#')
		if frag != "" {
			b.WriteString("…")
		}
	}
	return b.String()
}

// Validate reports every problem of c, each named by its JSON path.
func (c Config) Validate() error {
	var errs []error
	if len(c.Endpoints) == 0 {
		errs = append(errs, errors.New("endpoints: at least one HOST:PORT is required"))
	}
	if err := c.validateAddrs(); err != nil {
		errs = append(errs, err)
	}
	if err := ValidPrefix(c.Prefix); err != nil {
		errs = append(errs, err)
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		errs = append(errs, errors.New("tls: cert_file and key_file must be set together"))
	}
	if (c.Username == "") != (c.PasswordEnv == "") {
		errs = append(errs, errors.New("username: username and password_env must be set together"))
	}
	return errors.Join(errs...)
}

func (c Config) validateAddrs() error {
	var errs []error
	for i, ep := range c.Endpoints {
		if err := validAddr(ep); err != nil {
			errs = append(errs, fmt.Errorf("endpoints[%d]: %q: %w", i, ep, err))
		}
	}
	return errors.Join(errs...)
}

func validAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("must be HOST:PORT")
	}
	if host == "" {
		return errors.New("host is empty")
	}
	if strings.ContainsAny(host, "/ ") {
		return errors.New("host contains '/' or a space")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port must be 1..65535, got %q", port)
	}
	return nil
}

// ValidPrefix checks a prefix with or without its leading and trailing
// slash: segments of [A-Za-z0-9_.:-], none empty (except at the ends), none
// "." or "..".
func ValidPrefix(p string) error {
	inner := strings.Trim(p, "/")
	if inner == "" {
		return errors.New("prefix: must not be empty or \"/\": graygate must not own the whole keyspace")
	}
	for _, seg := range strings.Split(inner, "/") {
		switch {
		case seg == "":
			return fmt.Errorf("prefix: %q has an empty segment", p)
		case seg == "." || seg == "..":
			return fmt.Errorf("prefix: %q has a %q segment", p, seg)
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
				return fmt.Errorf("prefix: %q: segments may only hold A-Z a-z 0-9 _ . : -", p)
			}
		}
	}
	return nil
}

// NormalizePrefix returns p with exactly one leading and one trailing slash.
func NormalizePrefix(p string) string {
	return "/" + strings.Trim(p, "/") + "/"
}

// Where names the cluster in messages: "etcd at 127.0.0.1:2379".
func (c Config) Where() string {
	return "etcd at " + strings.Join(c.Endpoints, ",")
}

// Config reads the files t names into a client TLS configuration; each
// error names the field it concerns (tls.ca_file, ...).
func (t TLS) Config() (*tls.Config, error) {
	conf := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.ca_file: %s holds no PEM certificate", t.CAFile)
		}
		conf.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls.cert_file, tls.key_file: %w", err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf, nil
}
