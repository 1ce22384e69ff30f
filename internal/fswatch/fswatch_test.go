package fswatch

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestChain: what Chain names for the layouts Watch follows, as real
// paths of the entries a change of which can change the file read.
func TestChain(t *testing.T) {
	root := t.TempDir()
	real := func(p string) string {
		t.Helper()
		r, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	root = real(root)
	j := func(p ...string) string { return filepath.Join(append([]string{root}, p...)...) }
	mkdirs(t, j("plain"), j("live"), j("archive"), j("vol", "..ts1", "certs"), j("conf"), j("loop"))
	for _, f := range []string{j("plain", "a.pem"), j("archive", "c3.pem"), j("vol", "..ts1", "certs", "tls.crt")} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	symlink(t, "../archive/c3.pem", j("live", "c.pem"))
	symlink(t, j("live", "c.pem"), j("conf", "c.pem"))
	symlink(t, "..ts1", j("vol", "..data"))
	symlink(t, "..data/certs", j("vol", "certs"))
	symlink(t, j("live"), j("conf", "live"))
	symlink(t, "gone.pem", j("live", "dangling.pem"))
	symlink(t, "b", j("loop", "a"))
	symlink(t, "a", j("loop", "b"))
	// ".." after a link is taken in its target: conf/live/../archive is
	// root/archive, and lexically it would be conf/archive.
	symlink(t, "live/../archive/c3.pem", j("conf", "up.pem"))
	tests := []struct {
		name, path string
		want       []string
	}{
		{"plain file", j("plain", "a.pem"), []string{j("plain", "a.pem")}},
		{"missing file", j("plain", "b.pem"), []string{j("plain", "b.pem")}},
		{"missing directory", j("nope", "b.pem"), []string{j("nope")}},
		{"certbot live link", j("live", "c.pem"), []string{j("live", "c.pem"), j("archive", "c3.pem")}},
		{"link to a link", j("conf", "c.pem"), []string{j("conf", "c.pem"), j("live", "c.pem"), j("archive", "c3.pem")}},
		{"through a linked directory", j("conf", "live", "c.pem"), []string{j("conf", "live"), j("live", "c.pem"), j("archive", "c3.pem")}},
		{"dangling link", j("live", "dangling.pem"), []string{j("live", "dangling.pem"), j("live", "gone.pem")}},
		{"kubernetes item in a subdirectory", j("vol", "certs", "tls.crt"),
			[]string{j("vol", "certs"), j("vol", "..data"), j("vol", "..ts1", "certs", "tls.crt")}},
		{"dot-dot after a link", j("conf", "up.pem"), []string{j("conf", "up.pem"), j("conf", "live"), j("archive", "c3.pem")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Chain(tt.path); !slices.Equal(got, tt.want) {
				t.Errorf("Chain(%q) =\n%q\nwant\n%q", tt.path, got, tt.want)
			}
		})
	}
	t.Run("loop", func(t *testing.T) {
		got := Chain(j("loop", "a"))
		if len(got) != maxLinks+1 {
			t.Errorf("Chain of a link loop has %d entries, want %d", len(got), maxLinks+1)
		}
	})
	t.Run("relative", func(t *testing.T) {
		t.Chdir(j("conf"))
		want := []string{j("conf", "c.pem"), j("live", "c.pem"), j("archive", "c3.pem")}
		if got := Chain("c.pem"); !slices.Equal(got, want) {
			t.Errorf("Chain(%q) = %q, want %q", "c.pem", got, want)
		}
	})
}
