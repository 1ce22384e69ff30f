package fswatch

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
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

// TestFollowSeesDirectoryReplaced: a real directory on the way to the file
// (its own, or one above it) replaced by a rename (mv conf conf.old; mv
// new conf) is an event, and after Follow again an edit of the file in the
// new directory is one too.
func TestFollowSeesDirectoryReplaced(t *testing.T) {
	tests := []struct {
		name     string
		file     string // the watched file, under root
		replaced string // the directory renamed away and replaced, under root
	}{
		{"own directory", "a/b/conf.yaml", "a/b"},
		{"one above", "a/b/conf.yaml", "a"},
		{"two above", "x/a/b/conf.yaml", "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(root, tt.file)
			rel, err := filepath.Rel(tt.replaced, tt.file)
			if err != nil {
				t.Fatal(err)
			}
			fresh := filepath.Join(root, "new")
			for dir, body := range map[string]string{filepath.Dir(path): "v1", filepath.Dir(filepath.Join(fresh, rel)): "v2"} {
				mkdirs(t, dir)
				if err := os.WriteFile(filepath.Join(dir, filepath.Base(path)), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			w, err := fsnotify.NewWatcher()
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			relevant, err := Follow(w, []string{path})
			if err != nil {
				t.Fatal(err)
			}
			// await waits for an event that ok accepts: late events of the
			// rename must not pass for the write's.
			await := func(what string, ok func(fsnotify.Event) bool) {
				t.Helper()
				deadline := time.After(5 * time.Second)
				for {
					select {
					case ev := <-w.Events:
						if Relevant(relevant, ev) && ok(ev) {
							return
						}
					case err := <-w.Errors:
						t.Fatalf("watch error: %v", err)
					case <-deadline:
						t.Fatalf("no relevant event within 5s of %s", what)
					}
				}
			}
			target := filepath.Join(root, tt.replaced)
			if err := os.Rename(target, target+".old"); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(fresh, target); err != nil {
				t.Fatal(err)
			}
			await("the rename", func(fsnotify.Event) bool { return true })
			if relevant, err = Follow(w, []string{path}); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(path); err != nil || string(b) != "v2" {
				t.Fatalf("after the rename the file reads %q %v, want v2", b, err)
			}
			if err := os.WriteFile(path, []byte("v3"), 0o644); err != nil {
				t.Fatal(err)
			}
			await("a write in the new directory", func(ev fsnotify.Event) bool { return filepath.Clean(ev.Name) == path && ev.Has(fsnotify.Write) })
		})
	}
}
