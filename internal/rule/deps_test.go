package rule

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps the stores out of the rule package: checking a
// key must not pull in the store implementations (or, through them, etcd).
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/graygate/graygate/internal/rule").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/graygate/graygate/internal/store") || strings.Contains(dep, "etcd") {
			t.Errorf("internal/rule depends on %s", dep)
		}
	}
}
