package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/graygate/graygate/internal/config"
)

// demoRules are the seed 000 shapes the demo starts with.
const demoRules = `[
  {"key": "user_center_v2", "type": "gray", "rule_name": "user center v2 canary",
   "gray_percent": 30, "white_list": ["uid:10001"],
   "conditions": {"path_prefix": ["/api/user/"]},
   "targets": {"gray": "gray", "stable": "stable"}},
  {"key": "checkout_button", "type": "ab", "experiment_id": "exp_checkout_202611",
   "conditions": {"path_prefix": ["/shop/"]},
   "groups": [{"name": "A", "weight": 50, "target": "exp-a", "control": true},
              {"name": "B", "weight": 50, "target": "exp-b"}]}
]`

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "data-plane `ADDR`")
	adminListen := fs.String("admin-listen", "127.0.0.1:9080", "admin API `ADDR`")
	token := fs.String("admin-token", "demo-token", "admin bearer `TOKEN`")
	dataDir := fs.String("data-dir", "", "store `DIR` (default: a temporary directory removed on exit)")
	accessLog := fs.Bool("access-log", true, "print a JSON access log line per request")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	logger := newLogger(stderr, slog.LevelWarn)
	upstreams := map[string]string{}
	for _, name := range []string{"stable", "gray", "exp-a", "exp-b"} {
		addr, stop, err := startDemoUpstream(name)
		if err != nil {
			return err
		}
		defer stop()
		upstreams[name] = addr
	}
	dir := *dataDir
	if dir == "" {
		d, err := os.MkdirTemp("", "graygate-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	var rules []json.RawMessage
	if err := json.Unmarshal([]byte(demoRules), &rules); err != nil {
		return err
	}
	cfg := &config.Config{
		Listen: *listen, AdminListen: *adminListen, DataDir: dir,
		DefaultUpstream: "stable",
		AccessLog:       config.AccessLog{Enabled: *accessLog},
		Upstreams:       map[string]config.Upstream{},
		Rules:           rules,
	}
	for name, addr := range upstreams {
		cfg.Upstreams[name] = config.Upstream{Instances: []config.Instance{{Addr: addr, Metadata: map[string]string{"version": name}}}}
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	return serve(ctx, cfg, nil, *token, logger, stdout, stderr, func(data, admin string) {
		fmt.Fprintf(stderr, demoHelp, data, upstreams["stable"], upstreams["gray"], upstreams["exp-a"], upstreams["exp-b"],
			data, data, data, data, data, data, *token, admin, *token, admin, admin)
	})
}

const demoHelp = `
graygate demo is serving on http://%[1]s

  Operator console: http://%[13]s/ui/   (log in with the token %[12]s)

  upstreams: stable %[2]s, gray %[3]s, exp-a %[4]s, exp-b %[5]s
  rules: user_center_v2 sends 30%% of users (and uid 10001 always) on /api/user/ to gray;
         checkout_button splits /shop/ 50/50 between exp-a and exp-b.

Try these; each answer names the version that served it:
  curl -si http://%[6]s/api/user/profile -H 'X-User-Id: 10001'   # whitelisted: gray
  for u in 1 2 3 4 5 6 7 8 9 10; do curl -s http://%[7]s/api/user/profile -H "X-User-Id: $u"; done
  curl -s 'http://%[8]s/api/user/profile?user_id=42'             # identity from the query
  curl -s http://%[9]s/api/user/profile --cookie user_id=7      # identity from a cookie
  curl -si http://%[10]s/shop/cart -H 'X-User-Id: 3' | grep -i x-gray
  curl -s http://%[11]s/                                           # no rule: the default upstream

Change the canary live, and ask why a user landed where they did:
  curl -s -X PUT http://%[13]s/api/v1/rules/user_center_v2 -H 'Authorization: Bearer %[12]s' \
    -d '{"type":"gray","gray_percent":80,"conditions":{"path_prefix":["/api/user/"]},"targets":{"gray":"gray","stable":"stable"}}'
  curl -s -X POST http://%[15]s/api/v1/explain -H 'Authorization: Bearer %[14]s' \
    -d '{"path":"/api/user/profile","headers":{"X-User-Id":"5"}}'

Press Ctrl-C to stop.
`

// startDemoUpstream serves a tiny backend that names itself and echoes the
// coloring header it received.
func startDemoUpstream(name string) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("demo upstream %s: %w", name, err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		user := r.Header.Get("X-User-Id")
		fmt.Fprintf(w, "%s\tpath=%s user=%s tag=%s\n", strings.ToUpper(name), r.URL.Path, user, r.Header.Get("X-Gray-Tag"))
	})}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
