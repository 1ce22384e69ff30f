package gateway

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/store/etcdstore"
	"github.com/graygate/graygate/internal/testport"
)

// TestReadyzBeforeServingSaysWhy: a gateway opened on an etcd that does
// not answer, with no cache, says why it is not ready from the moment its
// admin API answers, not "not serving" until its listeners start. (The
// command's TestServeWithoutEtcdOrCache asked /readyz in that moment on a
// loaded machine and got the bare words.)
func TestReadyzBeforeServingSaysWhy(t *testing.T) {
	dir := t.TempDir()
	_, cfg := newEnv(t, baseConfig, dir, nil)
	ecfg, err := etcdstore.ParseURL("etcd://" + testport.Refused(t) + "/graygate")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := etcdstore.Open(ctx, ecfg, etcdstore.Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler),
		DialTimeout: 200 * time.Millisecond, WriteTimeout: time.Second, StartWithoutState: true})
	if err != nil {
		t.Fatalf("open etcd store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	g, err := New(Options{Config: cfg, Logger: slog.New(slog.DiscardHandler), Store: st})
	if err != nil {
		t.Fatal(err)
	}
	// The admin API on a real listener, before Serve: the moment between
	// the admin listener answering and the data plane serving.
	srv := httptest.NewServer(g.AdminHandler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "no rules to serve yet") {
		t.Fatalf("/readyz = %d %s, want 503 saying there are no rules yet, and why", resp.StatusCode, body)
	}
}
