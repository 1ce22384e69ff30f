package etcdstore

import (
	"crypto/tls"
	"fmt"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/graygate/graygate/internal/storeurl"
)

// Config says which etcd cluster and which part of its keyspace hold the
// rules; see storeurl.Config, where it is defined so that validating a
// config file does not need this package.
type Config = storeurl.Config

// TLS configures the client side of TLS; see storeurl.TLS.
type TLS = storeurl.TLS

// Scheme is the URL scheme that selects this store.
const Scheme = storeurl.Scheme

// ParseURL parses a store URL; see storeurl.ParseURL.
func ParseURL(s string) (Config, error) { return storeurl.ParseURL(s) }

func validPrefix(p string) error { return storeurl.ValidPrefix(p) }

func normalizePrefix(p string) string { return storeurl.NormalizePrefix(p) }

// clientConfig builds the etcd client configuration. Files and the
// password are read here, so their errors name the config path.
func clientConfig(c Config, o *Options) (clientv3.Config, error) {
	if err := c.Validate(); err != nil {
		return clientv3.Config{}, err
	}
	scheme := "http://"
	var tlsConf *tls.Config
	if c.TLS.On() {
		scheme = "https://"
		var err error
		if tlsConf, err = c.TLS.Config(); err != nil {
			return clientv3.Config{}, err
		}
	}
	urls := make([]string, len(c.Endpoints))
	for i, ep := range c.Endpoints {
		urls[i] = scheme + ep
	}
	var password string
	if c.PasswordEnv != "" {
		v, ok := o.LookupEnv(c.PasswordEnv)
		if !ok || v == "" {
			return clientv3.Config{}, fmt.Errorf("password_env: environment variable %q is not set or empty", c.PasswordEnv)
		}
		password = v
	}
	return clientv3.Config{
		Endpoints:   urls,
		DialTimeout: o.DialTimeout,
		// Pings find a dead TCP connection (a partition, a host that
		// vanished) that would otherwise hang the watch stream. etcd's
		// default --grpc-keepalive-min-time is 5s; pinging faster gets
		// the connection closed as abusive.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		MaxCallSendMsgSize:   o.MaxRequestBytes + 64<<10,
		TLS:                  tlsConf,
		Username:             c.Username,
		Password:             password,
		// The client logs through zap; this package reports what matters
		// (lost watch, outage, resync) through slog itself.
		Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{
			// gRPC's default reconnect backoff grows to two minutes, so
			// after a long outage a gateway would stay disconnected long
			// after etcd is back. Cap it at MaxBackoff.
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff: backoff.Config{
					BaseDelay:  100 * time.Millisecond,
					Multiplier: 1.6,
					Jitter:     0.2,
					MaxDelay:   o.MaxBackoff,
				},
				MinConnectTimeout: o.DialTimeout,
			}),
		},
	}, nil
}

// NewClient connects a plain etcd client with cfg's endpoints, TLS and
// auth, for tools that share a gateway fleet's etcd (graygate register).
func NewClient(cfg Config, dialTimeout time.Duration) (*clientv3.Client, error) {
	o := Options{DialTimeout: dialTimeout, LookupEnv: os.LookupEnv, MaxRequestBytes: 1536 << 10}
	cc, err := clientConfig(cfg, &o)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", cfg.Where(), err)
	}
	return cli, nil
}
