package main

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// etcd is a throwaway etcd server on loopback for -fleet.
type etcd struct {
	dir          string
	client, peer int
	mu           sync.Mutex
	cmd          *exec.Cmd
	exited       chan struct{}
	troubleUntil time.Time // writes may fail until then
}

func startEtcd(dir string) *etcd {
	for range 3 {
		ports := freePorts(2)
		e := &etcd{dir: dir, client: ports[0], peer: ports[1]}
		if e.start() {
			return e
		}
		e.stop()
		os.RemoveAll(dir)
	}
	return nil
}

func (e *etcd) url() string { return fmt.Sprintf("etcd://127.0.0.1:%d/soak", e.client) }

// start runs etcd on its data dir and waits for /health.
func (e *etcd) start() bool {
	peer := fmt.Sprintf("http://127.0.0.1:%d", e.peer)
	client := fmt.Sprintf("http://127.0.0.1:%d", e.client)
	cmd := exec.Command("etcd", "--name", "soak", "--data-dir", e.dir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "soak="+peer, "--log-level", "error")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "soak: -fleet needs etcd on PATH (scripts/etcd.sh installs it):", err)
		return false
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	e.mu.Lock()
	e.cmd, e.exited = cmd, exited
	e.mu.Unlock()
	for range 100 {
		if strings.Contains(get(client+"/health"), `"health":"true"`) {
			return true
		}
		select {
		case <-exited:
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	fmt.Fprintln(os.Stderr, "soak: etcd did not become healthy")
	return false
}

func (e *etcd) stop() {
	e.mu.Lock()
	cmd, exited := e.cmd, e.exited
	e.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-exited
}

// troubled says whether a write may fail now: etcd is away or hung, or
// came back less than 10 s ago.
func (e *etcd) troubled() bool {
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return time.Now().Before(e.troubleUntil)
}

func (e *etcd) trouble(d time.Duration) {
	e.mu.Lock()
	e.troubleUntil = time.Now().Add(d)
	e.mu.Unlock()
}

// chaos takes etcd away every 8–15 s for 1–3 s: killed and started again
// on its data, or stopped (SIGSTOP: it holds connections and answers
// nothing) and continued. The gateways must keep serving throughout
// (their clients' checks), and changes made after it is back must reach
// both (the operator's checks).
func (e *etcd) chaos(ctx context.Context, t *tally) {
	r := mrand.New(mrand.NewPCG(*seed, 9999))
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(8000+r.IntN(7000)) * time.Millisecond):
		}
		away := time.Duration(1000+r.IntN(2000)) * time.Millisecond
		e.trouble(away + 10*time.Second)
		e.mu.Lock()
		cmd := e.cmd
		e.mu.Unlock()
		if r.IntN(2) == 0 {
			e.stop()
			time.Sleep(away)
			if !e.start() {
				t.fail("etcd: did not start again")
				return
			}
			t.add("etcd: killed and started again")
		} else {
			cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(away)
			cmd.Process.Signal(syscall.SIGCONT)
			t.add("etcd: hung and continued")
		}
		e.trouble(10 * time.Second)
	}
}

// reaches checks that gateway g routes the way a change said within 3 s
// (a write answered 2xx serves on every gateway), polling every 2 ms.
func reaches(g *gateway, want, change string, t *tally) {
	start := time.Now()
	for {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/svc/ok", g.data), nil)
		req.Header.Set("X-User-Id", fmt.Sprint(mrand.IntN(100000)))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			var b [16]byte
			n, _ := resp.Body.Read(b[:])
			resp.Body.Close()
			if string(b[:n]) == want {
				took := time.Since(start)
				bucket := "within 10 ms"
				switch {
				case took > time.Second:
					bucket = "within 3 s"
				case took > 100*time.Millisecond:
					bucket = "within 1 s"
				case took > 10*time.Millisecond:
					bucket = "within 100 ms"
				}
				t.add(fmt.Sprintf("fleet: %s reached %s %s", change, g.name, bucket))
				return
			}
		}
		if time.Since(start) > 3*time.Second {
			t.fail(fmt.Sprintf("fleet: %s did not reach %s within 3 s", change, g.name))
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}
