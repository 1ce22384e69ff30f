package upstream

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Instance is one upstream server.
type Instance struct {
	// Addr is host:port, always with a port.
	Addr string
	// TLS is true for https targets.
	TLS bool
	// Weight is the relative share of traffic; 0 means 1.
	Weight int
	// Metadata is free-form discovery metadata (version, region, zone, …).
	Metadata map[string]string
}

// ErrNoInstance is wrapped by every error of Pick and PickVersion when the
// pool has no usable instance; the data plane answers 503.
var ErrNoInstance = errors.New("no healthy instance")

// NoInstanceError says why a pool had no instance to offer. Its message
// names the pool, as in `pool "user-center": no healthy instance (3 ejected)`.
type NoInstanceError struct {
	// Pool is the pool's name; for a subset, the whole target string.
	Pool string
	// Size is how many instances the pool (or subset) has.
	Size int
	// Ejected counts instances ejected by passive health, Failing those
	// failing their active probes.
	Ejected, Failing int
	// Selector is the subset's selector ("version=2"), empty for a pool.
	Selector string
}

func (e *NoInstanceError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pool %q: %s (", e.Pool, ErrNoInstance)
	switch {
	case e.Size == 0 && e.Selector != "":
		fmt.Fprintf(&b, "no instance has %s", e.Selector)
	case e.Size == 0:
		b.WriteString("no instances")
	default:
		sep := ""
		if e.Ejected > 0 {
			fmt.Fprintf(&b, "%d ejected", e.Ejected)
			sep = ", "
		}
		if e.Failing > 0 {
			fmt.Fprintf(&b, "%s%d failing health checks", sep, e.Failing)
		}
		if e.Ejected == 0 && e.Failing == 0 {
			fmt.Fprintf(&b, "%d unavailable", e.Size)
		}
	}
	b.WriteByte(')')
	return b.String()
}

// Unwrap returns ErrNoInstance.
func (e *NoInstanceError) Unwrap() error { return ErrNoInstance }

// ParseAddress turns a target that is not a pool name into an instance:
// "host:port", "http://host[:port]" or "https://host[:port]". Paths in URLs
// are not supported: a gateway forwards the request path unchanged. The
// host must be non-empty and hold no spaces, control characters or "/",
// and the port must be 1..65535, in either spelling: an address the
// dialer can never reach is refused here, where the error names it, and
// not on every request.
func ParseAddress(s string) (*Instance, error) {
	if s == "" {
		return nil, errors.New("empty address")
	}
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("invalid URL %q: %v", s, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return nil, fmt.Errorf("invalid URL %q: scheme must be http or https", s)
		}
		if u.Host == "" {
			return nil, fmt.Errorf("invalid URL %q: no host", s)
		}
		if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.ForceQuery || u.User != nil || u.Fragment != "" || strings.Contains(s, "#") {
			return nil, fmt.Errorf("invalid URL %q: only scheme://host[:port] is allowed", s)
		}
		host, port := u.Hostname(), u.Port()
		if port == "" {
			port = "80"
			if u.Scheme == "https" {
				port = "443"
			}
		}
		if err := checkHostPort(host, port); err != nil {
			return nil, fmt.Errorf("invalid URL %q: %s", s, err)
		}
		return &Instance{Addr: net.JoinHostPort(host, port), TLS: u.Scheme == "https"}, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return nil, fmt.Errorf("invalid address %q: want host:port, a URL or an upstream name", s)
	}
	if err := checkHostPort(host, port); err != nil {
		return nil, fmt.Errorf("invalid address %q: %s", s, err)
	}
	return &Instance{Addr: s}, nil
}

// checkHostPort says what is wrong with a host and port an instance would
// be dialled at, or returns nil.
func checkHostPort(host, port string) error {
	if host == "" {
		return errors.New("empty host")
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; c <= ' ' || c == 0x7f || c == '/' || c == '\\' {
			return fmt.Errorf("host %q has a space, a control character or a slash", host)
		}
		if c := host[i]; c == '[' || c == ']' {
			// An IPv6 literal comes here without its brackets.
			return fmt.Errorf("host %q has a stray bracket", host)
		}
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || port[0] == '+' || port[0] == '-' {
		return errors.New("port must be 1..65535")
	}
	return nil
}

// Protocol is how the data plane speaks to a pool's instances.
type Protocol uint8

const (
	// HTTP1 is HTTP/1.1, over TLS for https:// instances (the default).
	HTTP1 Protocol = iota
	// H2C is HTTP/2 over cleartext TCP, with prior knowledge.
	H2C
	// H2 is HTTP/2 over TLS.
	H2
)

// ParseProtocol reads the config's spelling: "http1" (or ""), "h2c", "h2".
func ParseProtocol(s string) (Protocol, error) {
	switch s {
	case "", "http1":
		return HTTP1, nil
	case "h2c":
		return H2C, nil
	case "h2":
		return H2, nil
	}
	return HTTP1, fmt.Errorf("must be \"http1\", \"h2c\" or \"h2\", got %q", s)
}

// String returns the config's spelling.
func (p Protocol) String() string {
	switch p {
	case H2C:
		return "h2c"
	case H2:
		return "h2"
	}
	return "http1"
}
