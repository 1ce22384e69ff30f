package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDataDirErrorSaysItOnce: a data dir that cannot be opened stops
// serve with one sentence naming the dir and the cause; it read "open
// store in X: open store X: …".
func TestDataDirErrorSaysItOnce(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--data-dir", file).CombinedOutput()
	want := "graygate: open store " + file + ": " + file + " is not a directory"
	if err == nil || !strings.Contains(string(out), want) || strings.Count(string(out), "open store") != 1 {
		t.Errorf("serve --data-dir FILE: %v\n%s\nwant it to stop saying %q, once", err, out, want)
	}
}

// TestStoreURLCredentialsNotRepeated: a store URL with a password in it,
// given to serve (--store or the config's store.url), to validate or to
// register, is refused with one error saying where credentials go, and
// the password is nowhere in the output (it used to be quoted in each
// endpoint's error).
func TestStoreURLCredentialsNotRepeated(t *testing.T) {
	const secret = "s3cr3t-Pa55"
	url := "etcd://graygate:" + secret + "@127.0.0.1:2379,127.0.0.1:22379/graygate"
	cfg := filepath.Join(t.TempDir(), "graygate.yaml")
	if err := os.WriteFile(cfg, []byte("store:\n  url: \""+url+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	runs := [][]string{
		{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--store", url},
		{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--config", cfg},
		{"validate", "--kind", "config", cfg},
		{"register", "--store", url, "--service", "api", "--addr", "127.0.0.1:9000"},
	}
	for _, args := range runs {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
		cancel()
		if err == nil || strings.Contains(string(out), "Pa55") || !strings.Contains(string(out), "credentials do not belong in the URL") ||
			!strings.Contains(string(out), "username and password_env") {
			t.Errorf("graygate %s: %v\n%s\nwant it refused, saying where credentials go, without the password", args[0], err, out)
		}
	}
}

// TestEtcdDownSaidOnceAndStopNamesSignal: serve started while etcd is
// unreachable, without a cache, says so in one ERROR line (the store and
// serve each said it), and when a signal stops it, it logs which one
// before it drains, so that an operator reading the log of a gateway that
// stopped learns why.
func TestEtcdDownSaidOnceAndStopNamesSignal(t *testing.T) {
	for _, tt := range []struct {
		sig  syscall.Signal
		name string
	}{{syscall.SIGTERM, "terminated"}, {syscall.SIGINT, "interrupt"}} {
		p := startServe(t, "--data-dir", t.TempDir(), "--store", "etcd://"+freeAddr(t)+"/graygate")
		p.waitLog(t, `"msg":"graygate serving"`)
		p.kill(tt.sig)
		p.mu.Lock()
		log := p.stderr.String()
		p.mu.Unlock()
		n := 0
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, "unreachable") {
				n++
			}
		}
		if n != 1 || !strings.Contains(log, "no rules to serve, and /readyz fails, until etcd answers") {
			t.Errorf("%d log lines say etcd is unreachable, want one, saying what it means:\n%s", n, log)
		}
		if want := `"why":"` + tt.name + ` signal received"`; !strings.Contains(log, `"msg":"stopping: draining, then closing the listeners"`) || !strings.Contains(log, want) {
			t.Errorf("after %v the log does not say it is stopping, with %s:\n%s", tt.sig, want, log)
		}
	}
}
