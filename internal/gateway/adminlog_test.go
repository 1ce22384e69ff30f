package gateway

import (
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
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
	e, cfg := newEnv(t, baseConfig, "", func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	e.wrapAdmin = func(l net.Listener) net.Listener { return &emfileListener{Listener: l} }
	e.restart(cfg) // waits until the admin API answers /healthz: after the retry
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
