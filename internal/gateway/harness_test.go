package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/store"
)

const token = "test-admin-token"

// env is a running gateway with four named backends that echo their name.
type env struct {
	t        *testing.T
	data     string // http://127.0.0.1:port
	admin    string
	backends map[string]string // name → addr
	gw       *Gateway
	client   *http.Client
	stop     context.CancelFunc
	done     chan error
	// openStore, when set, opens the store for each (re)start (etcd).
	openStore func() store.Store
	// options, when set, adjusts the gateway's Options at each (re)start.
	options func(*Options)
	// wrapAdmin, when set, wraps the admin listener at each (re)start.
	wrapAdmin func(net.Listener) net.Listener
}

func startBackends(t *testing.T, names ...string) map[string]string {
	out := map[string]string{}
	for _, name := range names {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Backend", name)
			w.Header().Set("X-Seen-Tag", r.Header.Get("X-Gray-Tag"))
			io.WriteString(w, name)
		}))
		t.Cleanup(srv.Close)
		out[name] = strings.TrimPrefix(srv.URL, "http://")
	}
	return out
}

// start runs a gateway whose config is yaml with {{name}} replaced by the
// backend addresses.
func start(t *testing.T, yaml string, dataDir string) *env {
	t.Helper()
	return startWith(t, yaml, dataDir, nil)
}

// startWith is start with options adjusting the gateway's Options.
func startWith(t *testing.T, yaml string, dataDir string, options func(*Options)) *env {
	t.Helper()
	e, cfg := newEnv(t, yaml, dataDir, options)
	e.restart(cfg)
	return e
}

// newEnv is startWith without the start: the caller adjusts e, then
// calls e.restart(cfg).
func newEnv(t *testing.T, yaml string, dataDir string, options func(*Options)) (*env, *config.Config) {
	t.Helper()
	e := &env{t: t, backends: startBackends(t, "stable", "gray", "a", "b"), options: options}
	for name, addr := range e.backends {
		yaml = strings.ReplaceAll(yaml, "{{"+name+"}}", addr)
	}
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	cfg.DataDir = dataDir
	return e, cfg
}

func (e *env) restart(cfg *config.Config) {
	t := e.t
	var st store.Store
	if e.openStore != nil {
		st = e.openStore()
	}
	opts := Options{Config: cfg, AdminToken: token, Logger: slog.New(slog.DiscardHandler), Store: st}
	if e.options != nil {
		e.options(&opts)
	}
	g, err := New(opts)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	dl, _ := net.Listen("tcp", "127.0.0.1:0")
	al, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	e.gw, e.stop, e.done = g, cancel, make(chan error, 1)
	e.data, e.admin = "http://"+dl.Addr().String(), "http://"+al.Addr().String()
	e.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var adminLn net.Listener = al
	if e.wrapAdmin != nil {
		adminLn = e.wrapAdmin(al)
	}
	go func() { e.done <- g.Serve(ctx, dl, adminLn) }()
	t.Cleanup(e.shutdown)
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := e.client.Get(e.admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway not ready: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *env) shutdown() {
	if e.stop == nil {
		return
	}
	e.stop()
	select {
	case <-e.done:
	case <-time.After(15 * time.Second):
		e.t.Error("gateway did not stop")
	}
	e.stop = nil
}

// api calls the admin API and decodes the JSON answer.
func (e *env) api(method, path string, body any, hdr ...string) (int, map[string]any) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		js, _ := json.Marshal(b)
		rd = bytes.NewReader(js)
	}
	req, _ := http.NewRequest(method, e.admin+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

func (e *env) mustPut(key string, rule any) map[string]any {
	e.t.Helper()
	code, out := e.api("PUT", "/api/v1/rules/"+key, rule)
	if code != 200 && code != 201 {
		e.t.Fatalf("PUT %s = %d %v", key, code, out)
	}
	return out
}

type answer struct {
	status                int
	rule, group, backend  string
	degraded, tag, cookie string
}

// get sends one request through the data plane.
func (e *env) get(path string, hdr ...string) (answer, error) {
	req, _ := http.NewRequest("GET", e.data+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{status: resp.StatusCode, rule: resp.Header.Get("X-Gray-Rule"), group: resp.Header.Get("X-Gray-Group"),
		degraded: resp.Header.Get("X-Gray-Degraded"), tag: resp.Header.Get("X-Seen-Tag"), backend: resp.Header.Get("X-Backend")}
	if a.backend != "" && a.backend != string(body) {
		return a, fmt.Errorf("backend header %q but body %q", a.backend, body)
	}
	for _, c := range resp.Cookies() {
		if c.Name == "gg_uid" {
			a.cookie = c.Value
		}
	}
	return a, nil
}

// refRule is the test's own, independent model of a rule, used to compute
// reference decisions without the gateway's code.
type refRule struct {
	Key         string   `json:"key"`
	Type        string   `json:"type"`
	Hash        string   `json:"hash,omitempty"`
	Priority    *int     `json:"priority,omitempty"`
	GrayPercent *float64 `json:"gray_percent,omitempty"`
	WhiteList   []string `json:"white_list,omitempty"`
	Conditions  *refCond `json:"conditions,omitempty"`
	Targets     *refTgts `json:"targets,omitempty"`
	Experiment  string   `json:"experiment_id,omitempty"`
	Groups      []refGrp `json:"groups,omitempty"`
}

type refCond struct {
	PathPrefix []string `json:"path_prefix,omitempty"`
}
type refTgts struct {
	Gray   string `json:"gray"`
	Stable string `json:"stable"`
}
type refGrp struct {
	Name   string `json:"name"`
	Weight int    `json:"weight"`
	Target string `json:"target"`
}

func pct(p float64) *float64 { return &p }

// refDecide returns (rule key, group, backend name) for uid on path.
func refDecide(rules []refRule, uid, path string) (string, string, string) {
	sorted := append([]refRule(nil), rules...)
	prio := func(r refRule) int {
		if r.Priority != nil {
			return *r.Priority
		}
		if r.Type == "ab" {
			return 200
		}
		return 100
	}
	sort.SliceStable(sorted, func(i, j int) bool {
		if prio(sorted[i]) != prio(sorted[j]) {
			return prio(sorted[i]) < prio(sorted[j])
		}
		return sorted[i].Key < sorted[j].Key
	})
	for _, r := range sorted {
		if r.Conditions != nil && len(r.Conditions.PathPrefix) > 0 {
			in := false
			for _, p := range r.Conditions.PathPrefix {
				in = in || strings.HasPrefix(path, p)
			}
			if !in {
				continue
			}
		}
		if r.Type == "gray" {
			wl := false
			for _, w := range r.WhiteList {
				wl = wl || w == "uid:"+uid
			}
			var in bool
			if r.Hash == "crc32" {
				in = uint64(crc32.ChecksumIEEE([]byte(uid+"_"+r.Key))%1000) < uint64(math.Floor(*r.GrayPercent*10+1e-9))
			} else {
				in = xxhash.Sum64String(r.Key+":"+uid)%10000 < uint64(math.Round(*r.GrayPercent*100))
			}
			if wl || in {
				return r.Key, "gray", r.Targets.Gray
			}
			continue
		}
		var idx int
		if r.Hash == "crc32" {
			hit := float64(crc32.ChecksumIEEE([]byte(uid+"_"+r.Experiment))%1000) / 1000 * 100
			idx = len(r.Groups) - 1
			for i, g := range r.Groups {
				if hit < float64(g.Weight) {
					idx = i
					break
				}
				hit -= float64(g.Weight)
			}
		} else {
			b := int(xxhash.Sum64String(r.Experiment+":"+uid) % 10000)
			acc := 0
			for i, g := range r.Groups {
				acc += g.Weight * 100
				if b < acc {
					idx = i
					break
				}
			}
		}
		return r.Key, r.Groups[idx].Name, r.Groups[idx].Target
	}
	return "", "default", "stable"
}

const baseConfig = `
default_upstream: stable
upstreams:
  stable: {instances: [{addr: "{{stable}}"}]}
  gray:   {instances: [{addr: "{{gray}}"}]}
  a:      {instances: [{addr: "{{a}}"}]}
  b:      {instances: [{addr: "{{b}}"}]}
`

// underLoad runs workers goroutines, each calling request(worker, n) for
// n = 0, 1, 2, … until the returned stop is called; stop waits for them.
func underLoad(workers int, request func(w, n int)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-done:
					return
				default:
				}
				request(w, n)
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}
