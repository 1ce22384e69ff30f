// Command soak runs a real `graygate serve` under a mix of well-behaved
// and abusive clients while an operator changes its rules, rolls back,
// reloads its config and rotates its certificate, and then checks what a
// user would: every well-behaved request got the answer its path calls
// for, every pipelined batch was answered whole, the very next request
// after each change obeyed it, each new certificate was served, and the
// process came back to its goroutine and file-descriptor counts.
//
// It needs the profiling build (bench/run.sh's overlay) for the goroutine
// count; bench/soak.sh builds both and runs it:
//
//	bench/soak.sh -d 45s -seed 9
//
// With -fleet it also starts etcd and a second gateway on the same rules
// (fleet.go): every change must reach the second gateway too, and etcd is
// killed and hung now and then while both keep serving.
//
// It exits 1, printing the failures, when any check fails.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

var (
	bin   = flag.String("bin", "", "the profiling build of graygate (required)")
	dur   = flag.Duration("d", 45*time.Second, "how long the clients run")
	seed  = flag.Uint64("seed", 1, "seed of every client's choices")
	fleet = flag.Bool("fleet", false, "share the rules through etcd (the etcd binary on PATH) with a second gateway")
)

// ports of the main gateway's listeners, on 127.0.0.1, for the clients.
var dataPort, tlsPort int

// token is the admin token the soak starts graygate with.
const token = "soak-token"

// tally counts outcomes by a short key; a key marked failed is a failed
// check.
type tally struct {
	mu     sync.Mutex
	m      map[string]int
	failed map[string]bool
}

func newTally() *tally { return &tally{m: map[string]int{}, failed: map[string]bool{}} }

func (t *tally) add(k string) { t.mu.Lock(); t.m[k]++; t.mu.Unlock() }

func (t *tally) fail(k string) { t.mu.Lock(); t.m[k]++; t.failed[k] = true; t.mu.Unlock() }

// freePorts picks n ports free on 127.0.0.1, holding them all until the
// last is picked so that no two are the same. They come from below the
// kernel's ephemeral range (32768 up), so that no listener on port 0 of
// another process (a test run beside the soak) takes one in the moment
// between the pick and graygate's bind, or while etcd is away; start tries
// again with other ports if one was taken all the same.
func freePorts(n int) []int {
	var ports []int
	for len(ports) < n {
		p := 20000 + mrand.IntN(12000)
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		defer ln.Close()
		ports = append(ports, p)
	}
	return ports
}

// short makes an error a tally key: no ports, at most 80 bytes.
func short(err error) string {
	s := regexp.MustCompile(`127\.0\.0\.1:\d+`).ReplaceAllString(err.Error(), "ADDR")
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}

func get(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return "ERR " + err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// gateway is one graygate serve process.
type gateway struct {
	name                    string
	data, tls, admin, pprof int
	dir, cfgPath, logPath   string
	cfg                     string
	cmd                     *exec.Cmd
	exited                  chan struct{}
	goroutines0, fds0       int
}

// snapshot reads the gateway's goroutine count (pprof), its open fds
// (/proc) and its in-flight gauges (/metrics).
func (g *gateway) snapshot() (goroutines, fds int, gauges string) {
	p := get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/goroutine?debug=1", g.pprof))
	if m := regexp.MustCompile(`goroutine profile: total (\d+)`).FindStringSubmatch(p); m != nil {
		goroutines, _ = strconv.Atoi(m[1])
	}
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", g.cmd.Process.Pid))
	var keep []string
	for _, l := range strings.Split(get(fmt.Sprintf("http://127.0.0.1:%d/metrics", g.admin)), "\n") {
		if !strings.HasPrefix(l, "#") && (strings.Contains(l, "in_flight") || strings.Contains(l, "client_connections")) {
			keep = append(keep, l)
		}
	}
	return goroutines, len(ents), strings.Join(keep, "\n")
}

// config is a gateway's config file: the gray rule g1 over /svc/, short
// timeouts, the access log on, the breaker off (the soak's slow paths
// would open it, and the operator checks where requests go).
func (g *gateway) config(stable, gray, storeURL string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: \"127.0.0.1:%d\"\nadmin_listen: \"127.0.0.1:%d\"\ndata_dir: %s\n", g.data, g.admin, filepath.Join(g.dir, "data"))
	if g.tls != 0 {
		fmt.Fprintf(&b, "tls_listen: \"127.0.0.1:%d\"\ntls: {certificates: [{cert_file: %s, key_file: %s}]}\n",
			g.tls, filepath.Join(g.dir, "leaf.pem"), filepath.Join(g.dir, "leaf.key"))
	}
	if storeURL != "" {
		fmt.Fprintf(&b, "store: {url: %q}\n", storeURL)
	}
	fmt.Fprintf(&b, `h2c: true
default_upstream: stable
breaker: {enabled: false}
access_log: {enabled: true, path: %s}
proxy:
  response_header_timeout: 1s
  read_timeout: 1s
  write_timeout: 1s
  client_read_timeout: 2s
  client_write_timeout: 2s
  client_idle_timeout: 3s
  read_header_timeout: 2s
  idle_timeout: 2s
upstreams:
  stable: {instances: [{addr: "%s"}]}
  gray: {instances: [{addr: "%s"}]}
rules:
  - {key: g1, type: gray, gray_percent: 30, conditions: {path_prefix: ["/svc/"]}, targets: {gray: gray, stable: stable}}
`, filepath.Join(g.dir, "access.log"), stable, gray)
	return b.String()
}

// start picks the gateway's ports, writes its config and starts it, and
// waits until it routes a request and its admin API and pprof answer;
// false when it exits first or does not within 10 s. It tries three
// times (a port taken by another process between the pick and the bind).
func (g *gateway) start(withTLS bool, stable, gray, storeURL string) bool {
	for attempt := 1; attempt <= 3; attempt++ {
		ports := freePorts(4)
		g.data, g.tls, g.admin, g.pprof = ports[0], 0, ports[2], ports[3]
		if withTLS {
			g.tls = ports[1]
		}
		g.cfg = g.config(stable, gray, storeURL)
		if g.startOnce() {
			time.Sleep(500 * time.Millisecond)
			var m string
			g.goroutines0, g.fds0, m = g.snapshot()
			fmt.Printf("%s before: %d goroutines, %d fds\n%s\n", g.name, g.goroutines0, g.fds0, m)
			return true
		}
		b, _ := os.ReadFile(g.logPath)
		fmt.Fprintf(os.Stderr, "soak: %s did not start (attempt %d); its log:\n%s\n", g.name, attempt, b)
	}
	return false
}

func (g *gateway) startOnce() bool {
	g.cfgPath, g.logPath = filepath.Join(g.dir, "graygate.yaml"), filepath.Join(g.dir, "graygate.log")
	if err := os.WriteFile(g.cfgPath, []byte(g.cfg), 0o644); err != nil {
		panic(err)
	}
	logf, err := os.Create(g.logPath)
	if err != nil {
		panic(err)
	}
	g.cmd = exec.Command(*bin, "serve", "--config", g.cfgPath)
	g.cmd.Env = append(os.Environ(), fmt.Sprintf("GRAYGATE_BENCH_PPROF=127.0.0.1:%d", g.pprof), "GRAYGATE_ADMIN_TOKEN="+token)
	g.cmd.Stdout, g.cmd.Stderr = logf, logf
	if err := g.cmd.Start(); err != nil {
		panic(err)
	}
	exited := make(chan struct{})
	g.exited = exited
	go func() { g.cmd.Wait(); logf.Close(); close(exited) }()
	for range 100 {
		select {
		case <-exited:
			return false
		case <-time.After(100 * time.Millisecond):
		}
		got := get(fmt.Sprintf("http://127.0.0.1:%d/svc/ok", g.data))
		if (got == "stable" || got == "gray") && !strings.HasPrefix(get(fmt.Sprintf("http://127.0.0.1:%d/healthz", g.admin)), "ERR") &&
			!strings.HasPrefix(get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/", g.pprof)), "ERR") {
			return true
		}
	}
	g.cmd.Process.Kill()
	<-exited
	return false
}

// settled waits up to 30 s for the gateway's goroutines and fds to come
// back to where they were before the soak; false (with a goroutine dump)
// when they do not, or when it has exited.
func (g *gateway) settled() bool {
	for i := range 30 {
		select {
		case <-g.exited:
			fmt.Printf("%s exited during the soak\n", g.name)
			return false
		case <-time.After(time.Second):
		}
		n, f, m := g.snapshot()
		if n <= g.goroutines0+2 && f <= g.fds0+2 {
			fmt.Printf("%s after %d s: %d goroutines, %d fds\n%s\n", g.name, i+1, n, f, m)
			return true
		}
		if i == 29 {
			fmt.Printf("%s after 30 s: %d goroutines, %d fds (before: %d, %d)\n%s\n", g.name, n, f, g.goroutines0, g.fds0, m)
			fmt.Println(get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/goroutine?debug=1", g.pprof)))
		}
	}
	return false
}

func main() {
	flag.Parse()
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "soak: -bin is required (bench/soak.sh builds it)")
		os.Exit(2)
	}
	os.Exit(run())
}

func run() int {
	stable, gray := upstream("stable"), upstream("gray")
	dir, err := os.MkdirTemp("", "graygate-soak")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	storeURL := ""
	var store *etcd
	if *fleet {
		if store = startEtcd(filepath.Join(dir, "etcd")); store == nil {
			return 1
		}
		defer store.stop()
		storeURL = store.url()
	}
	a := &gateway{name: "graygate", dir: filepath.Join(dir, "a")}
	os.MkdirAll(a.dir, 0o755)
	auth := newCA()
	auth.leaf(a.dir, 100)
	if !a.start(true, stable, gray, storeURL) {
		return 1
	}
	defer a.cmd.Process.Kill()
	dataPort, tlsPort = a.data, a.tls
	gateways := []*gateway{a}
	var b *gateway
	if *fleet {
		b = &gateway{name: "graygate-b", dir: filepath.Join(dir, "b")}
		os.MkdirAll(b.dir, 0o755)
		if !b.start(false, stable, gray, storeURL) {
			return 1
		}
		defer b.cmd.Process.Kill()
		gateways = append(gateways, b)
	}

	ctx, cancel := context.WithTimeout(context.Background(), *dur)
	defer cancel()
	// If a gateway dies, the clients stop at once: its ports are free for
	// any other process to take, and nothing should be sent there.
	for _, g := range gateways {
		go func() {
			select {
			case <-g.exited:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	t := newTally()
	cl := newClients(auth.pool)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { good(ctx, cl.h1, "h1", fmt.Sprintf("http://127.0.0.1:%d", dataPort), i, t) })
	}
	for i := range 4 {
		wg.Go(func() { good(ctx, cl.h2c, "h2c", fmt.Sprintf("http://127.0.0.1:%d", dataPort), 100+i, t) })
	}
	for i := range 3 {
		wg.Go(func() { good(ctx, cl.tls1, "tls-h1", fmt.Sprintf("https://127.0.0.1:%d", tlsPort), 200+i, t) })
		wg.Go(func() { good(ctx, cl.tls2, "tls-h2", fmt.Sprintf("https://127.0.0.1:%d", tlsPort), 300+i, t) })
	}
	for i := range 6 {
		wg.Go(func() { abuser(ctx, i, t) })
	}
	for i := range 2 {
		wg.Go(func() { tunnel(ctx, nil, i, t) })
		wg.Go(func() { tunnel(ctx, auth.pool, 10+i, t) })
	}
	for i := range 3 {
		wg.Go(func() { tlsAbuser(ctx, i, auth.pool, t) })
	}
	if b != nil {
		for i := range 4 {
			wg.Go(func() { good(ctx, cl.h1, "b h1", fmt.Sprintf("http://127.0.0.1:%d", b.data), 400+i, t) })
		}
		wg.Go(func() { store.chaos(ctx, t) })
	}
	wg.Go(func() { operator(ctx, a, b, store, t) })
	wg.Go(func() { rotator(ctx, auth, a.dir, t) })
	wg.Wait()
	cl.closeIdle()

	var keys []string
	for k := range t.m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fmt.Println("outcomes:")
	for _, k := range keys {
		mark := ""
		if t.failed[k] {
			mark = "  <- FAILED"
		}
		fmt.Printf("  %6d %s%s\n", t.m[k], k, mark)
	}
	failed := len(t.failed) > 0
	for _, g := range gateways {
		if !g.settled() {
			failed = true
		}
	}
	if failed {
		for _, g := range gateways {
			kept := filepath.Join(os.TempDir(), g.name+"-soak.log")
			b, _ := os.ReadFile(g.logPath)
			os.WriteFile(kept, b, 0o644)
			fmt.Printf("FAILED; %s's log is at %s\n", g.name, kept)
		}
		return 1
	}
	fmt.Println("PASS")
	return 0
}
