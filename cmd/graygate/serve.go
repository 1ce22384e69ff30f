package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/graygate/graygate/internal/config"
	"github.com/redis/go-redis/v9"

	"github.com/graygate/graygate/internal/gateway"
	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/store"
	"github.com/graygate/graygate/internal/store/etcdstore"
	"github.com/graygate/graygate/internal/tags"
)

// serveFlags are serve's flags; set ones override the config file.
type serveFlags struct {
	config, listen, adminListen, adminToken, dataDir, defaultUpstream, store string
	accessLog                                                                bool
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.config, "config", "", "config `FILE` (YAML)")
	fs.StringVar(&f.listen, "listen", "", "data-plane `ADDR` (default \":8080\")")
	fs.StringVar(&f.adminListen, "admin-listen", "", "admin API `ADDR` (default \"127.0.0.1:9080\")")
	fs.StringVar(&f.adminToken, "admin-token", "", "admin bearer `TOKEN` (or env GRAYGATE_ADMIN_TOKEN)")
	fs.StringVar(&f.dataDir, "data-dir", "", "`DIR` for the embedded rule store (default \"./data\")")
	fs.StringVar(&f.defaultUpstream, "default-upstream", "", "`HOST:PORT|URL` for requests no rule claims")
	fs.BoolVar(&f.accessLog, "access-log", false, "write a JSON access log line per request (to access_log.path: stdout by default, stderr or a file reopened on SIGUSR1)")
	fs.StringVar(&f.store, "store", "", "shared rule store `URL`: etcd://HOST:PORT[,HOST:PORT]/PREFIX (default: the file store in --data-dir)")
}

// load reads the config file (if any) and applies set flags over it.
func (f *serveFlags) load(fs *flag.FlagSet) (*config.Config, error) {
	var cfg *config.Config
	if f.config != "" {
		c, err := config.Load(f.config)
		if err != nil {
			return nil, err
		}
		cfg = c
	} else {
		c, err := config.Parse(nil)
		if err != nil {
			return nil, err
		}
		cfg = c
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if set["listen"] {
		cfg.Listen = f.listen
	}
	if set["admin-listen"] {
		cfg.AdminListen = f.adminListen
	}
	if set["data-dir"] {
		cfg.DataDir = f.dataDir
	}
	if set["default-upstream"] {
		cfg.DefaultUpstream = f.defaultUpstream
	}
	if set["access-log"] {
		cfg.AccessLog.Enabled = f.accessLog
	}
	if set["store"] {
		cfg.Store.URL = f.store
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("flags: %w", err)
	}
	from := "--admin-token"
	if f.adminToken == "" {
		f.adminToken, from = os.Getenv("GRAYGATE_ADMIN_TOKEN"), "GRAYGATE_ADMIN_TOKEN"
	}
	if msg := config.TokenProblem(f.adminToken); msg != "" {
		return nil, fmt.Errorf("%s: %s", from, msg)
	}
	return cfg, nil
}

func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f serveFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("serve takes no arguments, got %q", fs.Args())}
	}
	// Read before the load, so that what the watch compares with is
	// never newer than what serves (see config.WatchSince).
	var loaded []byte
	if f.config != "" {
		loaded, _ = os.ReadFile(f.config)
	}
	cfg, err := f.load(fs)
	if err != nil {
		return err
	}
	logger := newLogger(stderr, slog.LevelInfo)
	slog.SetDefault(logger)
	redis.SetLogger(tags.RedisLogger{L: logger}) // go-redis logs through a process-wide logger
	var src *configSource
	if f.config != "" {
		src = &configSource{path: f.config, loaded: loaded, load: func() (*config.Config, error) { return f.load(fs) }}
	}
	return serve(ctx, cfg, src, f.adminToken, logger, stdout, stderr, nil)
}

// configSource is a config file to watch and how to load it (with flags
// applied over it).
type configSource struct {
	path string
	// loaded is the file as it was read just before the first load: a
	// change made after it, before the watch began, is reloaded.
	loaded []byte
	load   func() (*config.Config, error)
}

// serve runs a gateway until ctx ends. src, if set, is reloaded on SIGHUP
// and whenever the file changes. access_log.path "stdout" and "stderr" are
// stdout and stderr; a file is reopened on SIGUSR1 (see reopenSignals).
func serve(ctx context.Context, cfg *config.Config, src *configSource, adminToken string, logger *slog.Logger, stdout, stderr io.Writer, ready func(dataAddr, adminAddr string)) error {
	ignoreBrokenPipes()
	if adminToken == "" && len(cfg.Admin.Tokens) == 0 {
		logger.Warn("no admin token configured: the admin API will refuse every /api request (set --admin-token or GRAYGATE_ADMIN_TOKEN)")
	}
	var st store.Store
	if ec, ok, err := cfg.Store.Etcd(); err != nil {
		return fmt.Errorf("store: %w", err)
	} else if ok {
		// StartWithoutState: a gateway started while etcd is down and
		// without a cache runs, not ready, and says why on /readyz.
		es, err := etcdstore.Open(ctx, ec, etcdstore.Options{DataDir: cfg.DataDir, HistoryLimit: cfg.Store.HistoryLimit, Logger: logger, StartWithoutState: true})
		if err != nil {
			return fmt.Errorf("open the etcd store %s: %w", cfg.Store.URL, err)
		}
		// Open has logged it if etcd is unreachable, once, with the cache
		// it serves or the reason it serves nothing.
		st = es
	}
	g, err := gateway.New(gateway.Options{Config: cfg, AdminToken: adminToken, Logger: logger, Stdout: stdout, Stderr: stderr, Store: st, Version: versionString()})
	if err != nil {
		if st != nil {
			_ = st.Close()
		}
		return err
	}
	// Decoding the config and compiling the first snapshot leave garbage
	// several times the size of the rules (a large whitelist above all);
	// collect it and give the memory back before serving.
	debug.FreeOSMemory()
	dataLn, err := listener.Listen("tcp", cfg.Listen, cfg.Lifecycle.ReusePort)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	var tlsLn net.Listener
	if cfg.TLSListen != "" {
		// The same SO_REUSEPORT handover as the cleartext listener.
		if tlsLn, err = listener.Listen("tcp", cfg.TLSListen, cfg.Lifecycle.ReusePort); err != nil {
			dataLn.Close()
			return fmt.Errorf("tls listen %s: %w", cfg.TLSListen, err)
		}
	}
	adminLn, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		dataLn.Close()
		if tlsLn != nil {
			tlsLn.Close()
		}
		return fmt.Errorf("admin listen %s: %w", cfg.AdminListen, err)
	}
	tlsAddr := ""
	if tlsLn != nil {
		tlsAddr = tlsLn.Addr().String()
	}
	logger.Info("graygate serving", "listen", dataLn.Addr().String(), "tls_listen", tlsAddr, "h2c", cfg.H2C, "admin_listen", adminLn.Addr().String(),
		"store", g.Status().Store.Kind, "data_dir", cfg.DataDir, "revision", g.Status().Revision, "version", versionString())
	// SIGHUP is caught from here until serve returns, the drain after
	// SIGTERM included: its default action would end the process and cut
	// the requests in flight. Without a config file there is nothing to
	// reload, and it is logged and ignored.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if src != nil {
		go watchConfig(ctx, src, g, logger, hup)
	} else {
		go ignoreHangups(ctx, hup, logger)
	}
	go reopenOnSignal(ctx, g, logger)
	if ready != nil {
		ready(dataLn.Addr().String(), adminLn.Addr().String())
	}
	err = g.ServeListeners(ctx, gateway.Listeners{Data: dataLn, TLS: tlsLn, Admin: adminLn})
	logger.Info("graygate stopped")
	return err
}

// ignoreHangups logs the SIGHUPs that hup receives until ctx ends: the
// gateway runs without a config file, so there is nothing to reload.
func ignoreHangups(ctx context.Context, hup <-chan os.Signal, logger *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			logger.Warn("SIGHUP ignored: graygate runs without --config, so there is no config file to reload")
		}
	}
}

// watchConfig reloads the config on a signal from hup (SIGHUP) and when the
// file changes.
func watchConfig(ctx context.Context, src *configSource, g *gateway.Gateway, logger *slog.Logger, hup <-chan os.Signal) {
	changed := make(chan struct{}, 1)
	go func() {
		if err := config.WatchSince(ctx, src.path, src.loaded, 200*time.Millisecond, func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		}); err != nil {
			logger.Error("config file not watched; SIGHUP still reloads", "err", err)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		case <-changed:
		}
		// An empty file is a save in progress (truncated, not yet
		// written), not a config with no upstreams, routes or tokens; the
		// file watch waits for the write, and so does a SIGHUP.
		if b, err := os.ReadFile(src.path); err == nil && len(bytes.TrimSpace(b)) == 0 {
			logger.Warn("config file is empty (a save in progress?): nothing reloaded; the running config keeps serving", "path", src.path)
			continue
		}
		// A failure is logged (and shown in /api/v1/status) by the
		// gateway, once.
		_ = g.ReloadConfigFile(ctx, src.load)
	}
}

// reopenOnSignal reopens the access log file on SIGUSR1, the signal
// logrotate's postrotate sends (nginx's convention), until ctx ends.
func reopenOnSignal(ctx context.Context, g *gateway.Gateway, logger *slog.Logger) {
	sigs := reopenSignals()
	if len(sigs) == 0 {
		return
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	defer signal.Stop(ch)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			if err := g.ReopenAccessLog(); err != nil {
				logger.Error("access log not reopened; it keeps writing to the old file", "err", err)
			}
		}
	}
}
