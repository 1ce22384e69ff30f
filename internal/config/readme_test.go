package config

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/graygate/graygate/internal/certs/certstest"
)

// TestREADMEConfigs parses every YAML example in the README, so that the
// documentation cannot drift from what the decoder accepts.
func TestREADMEConfigs(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(data), -1)
	if len(blocks) < 4 {
		t.Fatalf("found %d YAML examples in the README", len(blocks))
	}
	t.Setenv("OPS_TOKEN", "x")
	t.Setenv("HOOK_SECRET", "x") // the Notifications example signs with it
	// Fragments that name TLS files under /etc/graygate/tls/ get
	// stand-ins: certificates and CAs made for the test.
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "readme")
	files := map[string]string{}
	for _, name := range []string{"api", "admin"} {
		p := ca.Server(name+".pem", name+".key", name+".test")
		files["/etc/graygate/tls/"+name+".pem"], files["/etc/graygate/tls/"+name+".key"] = p.CertFile, p.KeyFile
	}
	for _, name := range []string{"clients-ca", "internal-ca"} {
		files["/etc/graygate/tls/"+name+".pem"] = ca.File
	}
	for i, b := range blocks {
		y := b[1]
		for from, to := range files {
			y = strings.ReplaceAll(y, from, to)
		}
		// Fragments that name upstreams they do not define get stand-ins.
		if !strings.Contains(y, "upstreams:") {
			y += "\nupstreams: {stable: {instances: [{addr: \"127.0.0.1:1\"}]}}\n"
		}
		if _, err := Parse([]byte(y)); err != nil {
			t.Errorf("README YAML example %d does not parse:\n%s\n%v", i+1, b[1], err)
		}
	}
}
