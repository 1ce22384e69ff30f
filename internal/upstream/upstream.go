// Package upstream holds named pools of upstream instances and picks one
// instance per request. Pools are immutable once built; per-instance state
// that must survive rule reloads (the round-robin cursor, later health) lives
// in values shared through the Registry, keyed by address.
package upstream

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/graygate/graygate/internal/limit"
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

// Pool is a named set of instances. It is safe for concurrent use and must
// not be modified after it has been published in a snapshot.
type Pool struct {
	Name      string
	Instances []*Instance
	// Gate caps concurrent requests to the pool (nil: no cap); the data
	// plane answers 503 when it is full.
	Gate   *limit.Gate
	cursor *atomic.Uint64
}

// ErrNoInstance is returned by Pick when the pool has no usable instance.
var ErrNoInstance = errors.New("no healthy instance")

// NewPool returns a pool; cursor state is private to this pool value.
func NewPool(name string, instances []*Instance) *Pool {
	return &Pool{Name: name, Instances: instances, cursor: new(atomic.Uint64)}
}

// Pick chooses an instance round robin.
func (p *Pool) Pick() (*Instance, error) {
	n := len(p.Instances)
	if n == 0 {
		return nil, fmt.Errorf("pool %q: %w", p.Name, ErrNoInstance)
	}
	if n == 1 {
		return p.Instances[0], nil
	}
	i := p.cursor.Add(1) - 1
	return p.Instances[i%uint64(n)], nil
}

// ParseAddress turns a target that is not a pool name into an instance:
// "host:port", "http://host[:port]" or "https://host[:port]". Paths in URLs
// are not supported: a gateway forwards the request path unchanged.
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
		if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
			return nil, fmt.Errorf("invalid URL %q: only scheme://host[:port] is allowed", s)
		}
		host := u.Host
		if u.Port() == "" {
			if u.Scheme == "https" {
				host = net.JoinHostPort(u.Hostname(), "443")
			} else {
				host = net.JoinHostPort(u.Hostname(), "80")
			}
		}
		return &Instance{Addr: host, TLS: u.Scheme == "https"}, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return nil, fmt.Errorf("invalid address %q: want host:port, a URL or an upstream name", s)
	}
	if host == "" {
		return nil, fmt.Errorf("invalid address %q: empty host", s)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return nil, fmt.Errorf("invalid address %q: port must be 1..65535", s)
	}
	return &Instance{Addr: s}, nil
}

// Registry resolves target strings to pools: names of configured upstreams
// first, then literal addresses. Pools for literal addresses are cached so that
// a target keeps one pool (and one cursor) across snapshots.
type Registry struct {
	named map[string]*Pool
	lit   *literalCache
}

type literalCache struct {
	mu    sync.Mutex
	pools map[string]*Pool
}

// NewRegistry builds a registry over the configured named pools.
func NewRegistry(named map[string]*Pool) *Registry {
	if named == nil {
		named = map[string]*Pool{}
	}
	return &Registry{named: named, lit: &literalCache{pools: map[string]*Pool{}}}
}

// WithNamed returns a registry with a new set of named pools that shares this
// registry's literal-address pools.
func (r *Registry) WithNamed(named map[string]*Pool) *Registry {
	if named == nil {
		named = map[string]*Pool{}
	}
	return &Registry{named: named, lit: r.lit}
}

// Named returns the configured pool with that name.
func (r *Registry) Named(name string) (*Pool, bool) {
	p, ok := r.named[name]
	return p, ok
}

// Resolve returns the pool a rule target names.
func (r *Registry) Resolve(target string) (*Pool, error) {
	if p, ok := r.named[target]; ok {
		return p, nil
	}
	r.lit.mu.Lock()
	defer r.lit.mu.Unlock()
	if p, ok := r.lit.pools[target]; ok {
		return p, nil
	}
	inst, err := ParseAddress(target)
	if err != nil {
		return nil, err
	}
	p := NewPool(target, []*Instance{inst})
	r.lit.pools[target] = p
	return p, nil
}
