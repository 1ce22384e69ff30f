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
// It exits 1, printing the failures, when any check fails.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
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
	bin  = flag.String("bin", "", "the profiling build of graygate (required)")
	dur  = flag.Duration("d", 45*time.Second, "how long the clients run")
	seed = flag.Uint64("seed", 1, "seed of every client's choices")
)

// ports of this run, all on 127.0.0.1.
var dataPort, tlsPort, admPort, pprofPort int

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
// last is picked so that no two are the same. Another process can still
// take one before graygate binds it; start then fails and is tried again.
func freePorts(n int) []int {
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
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

// snapshot reads graygate's goroutine count (pprof), its open fds (/proc)
// and its in-flight gauges (/metrics).
func snapshot(pid int) (goroutines, fds int, gauges string) {
	g := get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/goroutine?debug=1", pprofPort))
	if m := regexp.MustCompile(`goroutine profile: total (\d+)`).FindStringSubmatch(g); m != nil {
		goroutines, _ = strconv.Atoi(m[1])
	}
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	var keep []string
	for _, l := range strings.Split(get(fmt.Sprintf("http://127.0.0.1:%d/metrics", admPort)), "\n") {
		if !strings.HasPrefix(l, "#") && (strings.Contains(l, "in_flight") || strings.Contains(l, "client_connections")) {
			keep = append(keep, l)
		}
	}
	return goroutines, len(ents), strings.Join(keep, "\n")
}

const configTemplate = `listen: "127.0.0.1:%d"
tls_listen: "127.0.0.1:%d"
tls: {certificates: [{cert_file: %s, key_file: %s}]}
admin_listen: "127.0.0.1:%d"
data_dir: %s
h2c: true
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
`

// start writes the config and starts graygate on it, and waits until it
// routes a request and its admin API answers; nil when it exits first or
// does not within 10 s. exited is closed when the process ends.
func start(cfgPath, cfg, logPath string) (cmd *exec.Cmd, exited chan struct{}) {
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		panic(err)
	}
	logf, err := os.Create(logPath)
	if err != nil {
		panic(err)
	}
	cmd = exec.Command(*bin, "serve", "--config", cfgPath)
	cmd.Env = append(os.Environ(), fmt.Sprintf("GRAYGATE_BENCH_PPROF=127.0.0.1:%d", pprofPort), "GRAYGATE_ADMIN_TOKEN="+token)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	exited = make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	for range 100 {
		select {
		case <-exited:
			return nil, nil
		case <-time.After(100 * time.Millisecond):
		}
		got := get(fmt.Sprintf("http://127.0.0.1:%d/svc/ok", dataPort))
		if (got == "stable" || got == "gray") && !strings.HasPrefix(get(fmt.Sprintf("http://127.0.0.1:%d/healthz", admPort)), "ERR") &&
			!strings.HasPrefix(get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/", pprofPort)), "ERR") {
			return cmd, exited
		}
	}
	cmd.Process.Kill()
	<-exited
	return nil, nil
}

func main() {
	flag.Parse()
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "soak: -bin is required (bench/soak.sh builds it)")
		os.Exit(2)
	}
	stable, gray := upstream("stable"), upstream("gray")
	dir, err := os.MkdirTemp("", "graygate-soak")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	auth := newCA()
	auth.leaf(dir, 100)
	cfgPath := filepath.Join(dir, "graygate.yaml")
	logPath := filepath.Join(dir, "graygate.log")
	var cfg string
	var cmd *exec.Cmd
	var exited chan struct{}
	for attempt := 1; ; attempt++ {
		ports := freePorts(4)
		dataPort, tlsPort, admPort, pprofPort = ports[0], ports[1], ports[2], ports[3]
		cfg = fmt.Sprintf(configTemplate, dataPort, tlsPort, filepath.Join(dir, "leaf.pem"), filepath.Join(dir, "leaf.key"),
			admPort, filepath.Join(dir, "data"), filepath.Join(dir, "access.log"), stable, gray)
		if cmd, exited = start(cfgPath, cfg, logPath); cmd != nil {
			break
		}
		b, _ := os.ReadFile(logPath)
		fmt.Fprintf(os.Stderr, "soak: graygate did not start (attempt %d); its log:\n%s\n", attempt, b)
		if attempt == 3 {
			os.Exit(1)
		}
	}
	defer cmd.Process.Kill()
	time.Sleep(500 * time.Millisecond)
	g0, f0, m0 := snapshot(cmd.Process.Pid)
	fmt.Printf("before: %d goroutines, %d fds\n%s\n", g0, f0, m0)

	ctx, cancel := context.WithTimeout(context.Background(), *dur)
	defer cancel()
	// If graygate dies, the clients stop at once: its ports are free for
	// any other process to take, and nothing should be sent there.
	go func() {
		select {
		case <-exited:
			cancel()
		case <-ctx.Done():
		}
	}()
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
	wg.Go(func() { operator(ctx, cmd.Process.Pid, cfgPath, cfg, t) })
	wg.Go(func() { rotator(ctx, auth, dir, t) })
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
	leaked := true
wait:
	for i := range 30 {
		select {
		case <-exited:
			break wait
		case <-time.After(time.Second):
		}
		g, f, m := snapshot(cmd.Process.Pid)
		if g <= g0+2 && f <= f0+2 {
			fmt.Printf("after %d s: %d goroutines, %d fds\n%s\n", i+1, g, f, m)
			leaked = false
			break
		}
		if i == 29 {
			fmt.Printf("after 30 s: %d goroutines, %d fds (before: %d, %d)\n%s\n", g, f, g0, f0, m)
			fmt.Println(get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/goroutine?debug=1", pprofPort)))
		}
	}
	failed := len(t.failed) > 0 || leaked
	select {
	case <-exited:
		fmt.Println("graygate exited during the soak")
		failed = true
	default:
	}
	if failed {
		kept := filepath.Join(os.TempDir(), "graygate-soak.log")
		b, _ := os.ReadFile(logPath)
		os.WriteFile(kept, b, 0o644)
		fmt.Println("FAILED; graygate's log is at", kept)
		os.Exit(1)
	}
	fmt.Println("PASS")
}
