package config

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps the etcd client and gRPC out of config validation:
// `graygate validate` and every package that only reads a config must not
// link them. go list -deps sees the whole transitive import graph.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/graygate/graygate/internal/config").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "etcd") || strings.Contains(dep, "google.golang.org/grpc") {
			t.Errorf("internal/config depends on %s", dep)
		}
	}
}
