package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/graygate/graygate/internal/store/etcdstore"
	"github.com/graygate/graygate/internal/upstream"
)

// cmdRegister keeps a service instance registered in etcd until it is
// stopped, so that services in any language can join a pool: graygate
// register --store etcd://127.0.0.1:2379/graygate --service user-center
// --addr 127.0.0.1:9001 --meta version=2 --ttl 10s
func cmdRegister(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("register", flag.ContinueOnError)
	fs.SetOutput(stderr)
	storeURL := fs.String("store", "", "etcd `URL`: etcd://HOST:PORT[,HOST:PORT]/PREFIX (the gateways' --store)")
	service := fs.String("service", "", "service `NAME` (an upstream's discover: NAME)")
	addr := fs.String("addr", "", "the instance's `HOST:PORT`")
	weight := fs.Int("weight", 1, "relative `WEIGHT` for the weighted balancer")
	ttl := fs.Duration("ttl", 10*time.Second, "lease `TTL`: the instance disappears this long after graygate register stops")
	meta := kvFlag{}
	fs.Var(meta, "meta", "metadata `K=V` (repeatable), e.g. version=2")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	var missing []string
	for name, v := range map[string]string{"--store": *storeURL, "--service": *service, "--addr": *addr} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return usageError{"register needs " + strings.Join(missing, ", ")}
	}
	if _, err := upstream.ParseAddress(*addr); err != nil {
		return usageError{fmt.Sprintf("--addr: %v", err)}
	}
	cfg, err := etcdstore.ParseURL(*storeURL)
	if err != nil {
		return usageError{fmt.Sprintf("--store: %v", err)}
	}
	logger := newLogger(stderr, slog.LevelInfo)
	cli, err := etcdstore.NewClient(cfg, 5*time.Second)
	if err != nil {
		return err
	}
	defer cli.Close()
	reg, err := etcdstore.Register(ctx, cli, cfg.Prefix, *service, etcdstore.Instance{Addr: *addr, Weight: *weight, Metadata: meta}, *ttl)
	if err != nil {
		return err
	}
	logger.Info("registered; press Ctrl-C to deregister", "key", reg.Key(), "ttl", ttl.String())
	fmt.Fprintf(stdout, "registered %s in service %s (key %s)\n", *addr, *service, reg.Key())
	<-ctx.Done()
	return reg.Close()
}
