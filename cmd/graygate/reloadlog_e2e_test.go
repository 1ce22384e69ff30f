package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serveConfig runs graygate serve with a config file holding doc, and
// returns the process and a function that rewrites the file (its watch
// reloads it).
func serveConfig(t *testing.T, doc string) (*proc, func(doc string)) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "graygate.yaml")
	write := func(doc string) {
		t.Helper()
		if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(doc)
	return startServe(t, "--config", cfg, "--data-dir", filepath.Join(dir, "data")), write
}

// TestRefusedReloadLoggedOnce: a config reload that is refused is one
// ERROR line, which names the field and the value, not two (the gateway
// and serve's reload loop both logged it). The file watch reloads it.
func TestRefusedReloadLoggedOnce(t *testing.T) {
	base := "default_upstream: \"127.0.0.1:1\"\n"
	p, write := serveConfig(t, base)
	write(base + "proxy: {dial_timeout: fast}\n")
	p.waitLog(t, "config reload failed; the previous config keeps serving")
	time.Sleep(500 * time.Millisecond) // a second line would come at once
	p.mu.Lock()
	log := p.stderr.String()
	p.mu.Unlock()
	var lines []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "ERROR") && strings.Contains(l, "reload") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "proxy.dial_timeout") || !strings.Contains(lines[0], "fast") {
		t.Errorf("the refused reload logged %d ERROR lines, want one naming proxy.dial_timeout and its value:\n%s", len(lines), strings.Join(lines, "\n"))
	}
}

// TestReloadNamesEmptyIdentitySources: `identity: {sources: []}` (no
// client-supplied id is believed) against a config without it is a
// change, and the reload's log line names it; it was missed, since the
// JSON of both leaves the list out.
func TestReloadNamesEmptyIdentitySources(t *testing.T) {
	base := "default_upstream: \"127.0.0.1:1\"\n"
	p, write := serveConfig(t, base)
	write(base + "identity: {sources: []}\n")
	p.waitLog(t, `"msg":"config reloaded"`)
	p.waitLog(t, `"changed":["identity"]`)
}
