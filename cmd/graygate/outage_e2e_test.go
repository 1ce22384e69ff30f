package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/testport"
)

// TestServeWithoutEtcdOrCache: serve --store etcd:// while nothing answers
// there and the data dir holds no cache starts anyway, alive but not
// ready, and /readyz says why (issue 12, item 3).
func TestServeWithoutEtcdOrCache(t *testing.T) {
	url := "etcd://" + testport.Refused(t) + "/graygate" // nothing listens there
	p := startServe(t, "--store", url, "--data-dir", filepath.Join(t.TempDir(), "data"))
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + p.admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(body), "no rules to serve yet") || !strings.Contains(string(body), "unreachable") {
		t.Errorf("/readyz = %d %s, want 503 saying etcd is unreachable and there are no rules", resp.StatusCode, body)
	}
}
