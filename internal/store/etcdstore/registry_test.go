package etcdstore

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/graygate/graygate/internal/store/etcdstore/etcdtest"
)

// Environment of the registering helper process (see TestMain).
const (
	helperEnv         = "GRAYGATE_ETCDSTORE_HELPER"
	helperEndpointEnv = "GRAYGATE_ETCDSTORE_HELPER_ENDPOINT"
	helperPrefixEnv   = "GRAYGATE_ETCDSTORE_HELPER_PREFIX"
)

// helperInstance is what the helper process registers in service "api".
var helperInstance = Instance{Addr: "10.0.0.1:8080", Weight: 5, Metadata: map[string]string{"version": "v2"}}

// TestMain runs the test binary as a registering gateway when asked to by
// TestRegistry, so that the test can kill a real process that holds a
// lease.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "register" {
		os.Exit(registerHelper())
	}
	os.Exit(m.Run())
}

// registerHelper registers helperInstance with a 2s TTL, says so on stdout
// and waits to be killed. It exits by itself after a minute, so that it can
// never outlive a broken test for long.
func registerHelper() int {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"http://" + os.Getenv(helperEndpointEnv)},
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := Register(ctx, cli, os.Getenv(helperPrefixEnv), "api", helperInstance, 2*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("registered", r.Key())
	time.Sleep(time.Minute)
	return 0
}

// lists records what WatchInstances delivers.
type lists struct {
	mu   sync.Mutex
	got  map[string][]Instance
	n    map[string]int
	wake chan struct{}
}

func newLists() *lists {
	return &lists{got: make(map[string][]Instance), n: make(map[string]int), wake: make(chan struct{}, 1)}
}

func (l *lists) fn(service string, instances []Instance) {
	l.mu.Lock()
	l.got[service] = instances
	l.n[service]++
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// addrs returns the addresses last delivered for service, and how many
// deliveries there were.
func (l *lists) addrs(service string) ([]string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, inst := range l.got[service] {
		out = append(out, inst.Addr)
	}
	return out, l.n[service]
}

// waitFor waits until the delivered list of service has exactly addrs and
// returns when that happened.
func (l *lists) waitFor(t *testing.T, service string, timeout time.Duration, addrs ...string) time.Time {
	t.Helper()
	deadline := time.After(timeout)
	for {
		got, n := l.addrs(service)
		if n > 0 && slices.Equal(got, addrs) {
			return time.Now()
		}
		select {
		case <-l.wake:
		case <-deadline:
			t.Fatalf("service %q: instances %q after %d deliveries and %v, want %q", service, got, n, timeout, addrs)
		}
	}
}

func TestRegistry(t *testing.T) {
	t.Parallel() // mostly waiting for timeouts, leases and restarts
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	prefix := prefixOf(t)
	ctx, cancel := context.WithCancel(t.Context())
	api, all := newLists(), newLists()
	var watchers sync.WaitGroup
	t.Cleanup(watchers.Wait) // after cancel (cleanups run last-in, first-out)
	t.Cleanup(cancel)
	for _, w := range []struct {
		service string
		l       *lists
	}{{"api", api}, {"", all}} {
		watchers.Go(func() {
			if err := WatchInstances(ctx, cli, prefix, w.service, w.l.fn); err != nil {
				t.Errorf("WatchInstances(%q) = %v", w.service, err)
			}
		})
	}
	// A named service is reported at once, even when empty.
	api.waitFor(t, "api", 5*time.Second)
	if _, n := api.addrs("api"); n != 1 {
		t.Errorf("api delivered %d times before any instance, want 1", n)
	}

	// Another process registers and is killed: its instance must vanish
	// when its lease expires, not before.
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"=register", helperEndpointEnv+"="+srv.Endpoint(), helperPrefixEnv+"="+prefix)
	helper.Stderr = os.Stderr
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { helper.Process.Kill(); helper.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "registered ") {
		t.Fatalf("helper process said %q, %v", line, err)
	}
	api.waitFor(t, "api", 5*time.Second, helperInstance.Addr)
	all.waitFor(t, "api", 5*time.Second, helperInstance.Addr)
	api.mu.Lock()
	if got := api.got["api"][0]; !reflect.DeepEqual(got, helperInstance) {
		t.Errorf("delivered instance = %+v, want %+v", got, helperInstance)
	}
	api.mu.Unlock()

	// This process registers one more, with an address that holds
	// slashes, and in a second service.
	local := Instance{Addr: "http://10.0.0.2:80/base", Weight: 1}
	reg, err := Register(ctx, cli, prefix, "api", local, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	web, err := Register(ctx, cli, prefix, "web", Instance{Addr: "10.0.0.3:80"}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	api.waitFor(t, "api", 5*time.Second, helperInstance.Addr, local.Addr)
	all.waitFor(t, "web", 5*time.Second, "10.0.0.3:80")
	if want := normalizePrefix(prefix) + "instances/api/http:%2F%2F10.0.0.2:80%2Fbase"; reg.Key() != want {
		t.Errorf("Key() = %q, want %q: the address escaped into one segment", reg.Key(), want)
	}

	killed := time.Now()
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	gone := api.waitFor(t, "api", 6*time.Second, local.Addr)
	if after := gone.Sub(killed); after < time.Second {
		t.Errorf("killed instance vanished %v after the kill, before its 2s lease could expire", after)
	}
	t.Logf("killed instance vanished %v after the kill", gone.Sub(killed))
	// The local registration outlived its TTL: it is kept alive.
	if time.Since(killed) < 2*time.Second {
		time.Sleep(2*time.Second - time.Since(killed))
	}
	if resp, err := cli.Get(ctx, reg.Key()); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("kept-alive registration after its TTL: %v, %v", resp, err)
	}

	// A lost lease (revoked here by someone else) is replaced.
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(reg.lease.Load())); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "registration was not renewed after its lease was revoked", func() bool {
		resp, err := cli.Get(ctx, reg.Key())
		return reg.Reregistrations() == 1 && err == nil && len(resp.Kvs) == 1
	})
	api.waitFor(t, "api", 5*time.Second, local.Addr)

	// Close deregisters at once.
	if err := web.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	closed := time.Now()
	all.waitFor(t, "web", time.Second)
	if took := time.Since(closed); took > time.Second {
		t.Errorf("closed registration vanished after %v, want at once", took)
	}
	all.mu.Lock()
	services := slices.Sorted(maps.Keys(all.got))
	all.mu.Unlock()
	if !slices.Equal(services, []string{"api", "web"}) {
		t.Errorf("services seen by the watcher of all services = %q", services)
	}
}

func TestRegistryArguments(t *testing.T) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:1"}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := t.Context()
	tests := []struct {
		name    string
		prefix  string
		service string
		inst    Instance
		ttl     time.Duration
		want    string
	}{
		{"empty prefix", "/", "api", Instance{Addr: "a:1"}, time.Second, "prefix"},
		{"bad service", "/gg", "a/b", Instance{Addr: "a:1"}, time.Second, "service"},
		{"no addr", "/gg", "api", Instance{}, time.Second, "addr"},
		{"negative weight", "/gg", "api", Instance{Addr: "a:1", Weight: -1}, time.Second, "weight"},
		{"short ttl", "/gg", "api", Instance{Addr: "a:1"}, 500 * time.Millisecond, "ttl"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Register(ctx, cli, tt.prefix, tt.service, tt.inst, tt.ttl)
			if r != nil {
				r.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want+":") {
				t.Errorf("Register = %v, want an error naming %q", err, tt.want)
			}
		})
	}
	if err := WatchInstances(ctx, cli, "/gg", "a b", func(string, []Instance) {}); err == nil || !strings.Contains(err.Error(), "service:") {
		t.Errorf("WatchInstances with a bad service = %v", err)
	}
	if err := WatchInstances(ctx, cli, "/gg", "", nil); err == nil || !strings.Contains(err.Error(), "fn is nil") {
		t.Errorf("WatchInstances with a nil fn = %v", err)
	}
}
