package gateway

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/config"
)

// emfileListener fails its first Accept as a process out of descriptors
// does: a temporary error, after which net/http retries.
type emfileListener struct {
	net.Listener
	failed atomic.Bool
}

type emfileError struct{}

func (emfileError) Error() string   { return "accept4: too many open files" }
func (emfileError) Timeout() bool   { return false }
func (emfileError) Temporary() bool { return true }

func (l *emfileListener) Accept() (net.Conn, error) {
	if l.failed.CompareAndSwap(false, true) {
		return nil, emfileError{}
	}
	return l.Listener.Accept()
}

// TestAdminServerLogsToGatewayLog: what the admin API's HTTP server says
// of itself (here, an accept that failed for want of descriptors, and its
// retry) goes to the gateway's log at WARN with component "admin", not to
// slog's default logger at INFO with no component; and the admin API
// answers after the retry.
func TestAdminServerLogsToGatewayLog(t *testing.T) {
	logs := &syncBuffer{}
	yaml := baseConfig
	for name, addr := range startBackends(t, "stable", "gray", "a", "b") {
		yaml = strings.ReplaceAll(yaml, "{{"+name+"}}", addr)
	}
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	g, err := New(Options{Config: cfg, AdminToken: token, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	dl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, dl, &emfileListener{Listener: al}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the gateway did not stop")
		}
	})
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + al.Addr().String() + "/healthz")
	if err != nil {
		t.Fatalf("the admin API after a failed accept: %v", err)
	}
	resp.Body.Close()
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "too many open files") {
			line = l
		}
	}
	if !strings.Contains(line, `"level":"WARN"`) || !strings.Contains(line, `"component":"admin"`) || !strings.Contains(line, "retrying") {
		t.Errorf("the admin server's accept error in the gateway's log: %q, want it at WARN with component admin", line)
	}
}
