package certs

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/certs/certstest"
)

// watching waits until st's watch loop has taken the signal of New's
// Update, which it does after its first watches are in place, so that a
// change made after it returns is seen.
func watching(t *testing.T, st *Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(st.updated) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the watch loop never started")
		}
		time.Sleep(time.Millisecond)
	}
}

// waitLog waits until logs holds want, or fails the test after 10 s.
func waitLog(t *testing.T, logs *lockedBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q logged; log:\n%s", want, logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

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

// rewrite writes the contents of from over to in place (the same inode,
// truncated and written), as a tool that does not write through a
// temporary file and a rename does.
func rewrite(t *testing.T, to, from string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(to, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestWatchCertbotRewriteInPlace: cert_file and key_file are certbot's
// links in live/, and the files they point to in archive/ are rewritten
// in place; only archive/ sees events. The key is written first: the
// half-written pair is refused, the old certificate keeps serving, and
// the certificate's write is loaded.
func TestWatchCertbotRewriteInPlace(t *testing.T) {
	root := t.TempDir()
	ca := certstest.NewCA(t, root, "test")
	live, archive := filepath.Join(root, "live", "example.com"), filepath.Join(root, "archive", "example.com")
	mkdirs(t, live, archive)
	first := ca.Server(filepath.Join(archive, "fullchain1.pem"), filepath.Join(archive, "privkey1.pem"), "gw.test")
	symlink(t, "../../archive/example.com/fullchain1.pem", filepath.Join(live, "fullchain.pem"))
	symlink(t, "../../archive/example.com/privkey1.pem", filepath.Join(live, "privkey.pem"))
	var logs lockedBuffer
	st, err := New(Settings{Certificates: []Pair{{filepath.Join(live, "fullchain.pem"), filepath.Join(live, "privkey.pem")}}},
		slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	addr, _, stop := watch(t, st)
	watching(t, st)
	waitSerial(t, addr, ca, first.Serial)

	scratch := t.TempDir()
	for i := range 2 {
		next := ca.Server(filepath.Join(scratch, "s.pem"), filepath.Join(scratch, "s.key"), "gw.test")
		rewrite(t, first.KeyFile, next.KeyFile)
		waitLog(t, &logs, "not reloaded")
		if got, err := serial(t, addr, "gw.test", ca, nil); err != nil || got == next.Serial {
			t.Fatalf("rewrite %d: with only the key written, serial %d (%v), want the previous certificate", i, got, err)
		}
		rewrite(t, first.CertFile, next.CertFile)
		waitSerial(t, addr, ca, next.Serial)
		logs.Reset()
	}
	stop()
}

// renew does what a certbot renewal does: it writes the next numbered
// files in archive and re-points the links in live to them, the key's
// first, each by removing the link and making it again.
func renew(t *testing.T, ca *certstest.CA, live, archive string, n int) certstest.Pair {
	t.Helper()
	p := ca.Server(filepath.Join(archive, fmt.Sprintf("fullchain%d.pem", n)), filepath.Join(archive, fmt.Sprintf("privkey%d.pem", n)), "gw.test")
	for _, name := range []string{"privkey", "fullchain"} {
		link := filepath.Join(live, name+".pem")
		if err := os.Remove(link); err != nil {
			t.Fatal(err)
		}
		symlink(t, fmt.Sprintf("../../archive/example.com/%s%d.pem", name, n), link)
	}
	return p
}

// TestWatchCertbotRepoint: a certbot renewal writes new files in archive/
// and re-points the links in live/, reached from cert_file directly, by
// the operator's own link to the live link (a link in a directory that
// sees no event at all), or through a link to the live directory. After
// each renewal the new target, found again, is watched: a later in-place
// rewrite of it is loaded too.
func TestWatchCertbotRepoint(t *testing.T) {
	tests := []struct {
		name string
		// conf makes the configured cert_file and key_file in conf.
		conf func(t *testing.T, conf, live string) (cert, key string)
	}{
		{"live link", func(t *testing.T, conf, live string) (string, string) {
			return filepath.Join(live, "fullchain.pem"), filepath.Join(live, "privkey.pem")
		}},
		{"link to the live link", func(t *testing.T, conf, live string) (string, string) {
			symlink(t, filepath.Join(live, "fullchain.pem"), filepath.Join(conf, "api.pem"))
			symlink(t, filepath.Join(live, "privkey.pem"), filepath.Join(conf, "api.key"))
			return filepath.Join(conf, "api.pem"), filepath.Join(conf, "api.key")
		}},
		{"link to the live directory", func(t *testing.T, conf, live string) (string, string) {
			symlink(t, live, filepath.Join(conf, "tls"))
			return filepath.Join(conf, "tls", "fullchain.pem"), filepath.Join(conf, "tls", "privkey.pem")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			ca := certstest.NewCA(t, root, "test")
			conf := filepath.Join(root, "graygate")
			live, archive := filepath.Join(root, "letsencrypt", "live", "example.com"), filepath.Join(root, "letsencrypt", "archive", "example.com")
			mkdirs(t, conf, live, archive)
			first := ca.Server(filepath.Join(archive, "fullchain1.pem"), filepath.Join(archive, "privkey1.pem"), "gw.test")
			symlink(t, "../../archive/example.com/fullchain1.pem", filepath.Join(live, "fullchain.pem"))
			symlink(t, "../../archive/example.com/privkey1.pem", filepath.Join(live, "privkey.pem"))
			cert, key := tt.conf(t, conf, live)
			st, err := New(Settings{Certificates: []Pair{{cert, key}}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			addr, _, stop := watch(t, st)
			watching(t, st)
			waitSerial(t, addr, ca, first.Serial)

			var last certstest.Pair
			for n := 2; n <= 3; n++ {
				last = renew(t, ca, live, archive, n)
				waitSerial(t, addr, ca, last.Serial)
			}
			scratch := t.TempDir()
			next := ca.Server(filepath.Join(scratch, "s.pem"), filepath.Join(scratch, "s.key"), "gw.test")
			rewrite(t, last.KeyFile, next.KeyFile)
			rewrite(t, last.CertFile, next.CertFile)
			waitSerial(t, addr, ca, next.Serial)
			stop()
		})
	}
}

// volume is a Kubernetes Secret or ConfigMap volume as kubelet's atomic
// writer keeps it: the files in a timestamped directory, ..data a link
// to it, and a link for each top-level name to ..data/name.
type volume struct {
	t   *testing.T
	dir string
	cur string // the timestamped directory ..data points to
	n   int
}

// write publishes files (relative names, which may have directories) as
// the volume's new contents the way kubelet does: a new timestamped
// directory, a ..data_tmp link to it renamed over ..data, and the old
// directory removed.
func (v *volume) write(files map[string][]byte) {
	t := v.t
	t.Helper()
	v.n++
	ts := time.Now().Format("..2006_01_02_15_04_05.") + fmt.Sprintf("%09d", v.n)
	for name, b := range files {
		p := filepath.Join(v.dir, ts, name)
		mkdirs(t, filepath.Dir(p))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if v.cur == "" {
		symlink(t, ts, filepath.Join(v.dir, "..data"))
		for name := range files {
			top := strings.Split(name, "/")[0]
			if _, err := os.Lstat(filepath.Join(v.dir, top)); err == nil {
				continue
			}
			symlink(t, filepath.Join("..data", top), filepath.Join(v.dir, top))
		}
		v.cur = ts
		return
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	symlink(t, ts, tmp)
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(v.dir, v.cur)); err != nil {
		t.Fatal(err)
	}
	v.cur = ts
}

// TestWatchKubernetesDataSwap: a Secret volume's update swaps its ..data
// link; events name ..data and never the certificate's own name. The
// certificate is a top-level file of the volume, an item in a
// subdirectory of it (the configured directory is itself a link into
// ..data, whose old target is removed), or reached by the operator's own
// link into the volume (a directory that sees no event at all). Each
// layout is updated several times: the watch must follow the new targets.
func TestWatchKubernetesDataSwap(t *testing.T) {
	tests := []struct {
		name string
		// cert and key are the items' names in the volume.
		cert, key string
		// link, when set, makes cert_file and key_file links in another
		// directory to the items.
		link bool
	}{
		{"volume file", "tls.crt", "tls.key", false},
		{"item in a subdirectory", "certs/tls.crt", "certs/tls.key", false},
		{"link into the volume", "tls.crt", "tls.key", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			ca := certstest.NewCA(t, root, "test")
			vol := &volume{t: t, dir: filepath.Join(root, "tls")}
			conf := filepath.Join(root, "graygate")
			scratch := filepath.Join(root, "scratch")
			mkdirs(t, vol.dir, conf, scratch)
			issue := func() certstest.Pair {
				p := ca.Server(filepath.Join(scratch, "s.pem"), filepath.Join(scratch, "s.key"), "gw.test")
				files := map[string][]byte{}
				for name, from := range map[string]string{tt.cert: p.CertFile, tt.key: p.KeyFile} {
					b, err := os.ReadFile(from)
					if err != nil {
						t.Fatal(err)
					}
					files[name] = b
				}
				vol.write(files)
				return p
			}
			first := issue()
			cert, key := filepath.Join(vol.dir, tt.cert), filepath.Join(vol.dir, tt.key)
			if tt.link {
				symlink(t, cert, filepath.Join(conf, "api.pem"))
				symlink(t, key, filepath.Join(conf, "api.key"))
				cert, key = filepath.Join(conf, "api.pem"), filepath.Join(conf, "api.key")
			}
			st, err := New(Settings{Certificates: []Pair{{cert, key}}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			addr, _, stop := watch(t, st)
			watching(t, st)
			waitSerial(t, addr, ca, first.Serial)
			for range 3 {
				next := issue()
				waitSerial(t, addr, ca, next.Serial)
			}
			stop()
		})
	}
}

// TestWatchBusyNeighbour: a file written all the time beside the
// certificate (a log) neither reloads anything nor keeps the debounce
// from ever ending: a rotation is still loaded.
func TestWatchBusyNeighbour(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "test")
	first := ca.Server("s.pem", "s.key", "gw.test")
	st, err := New(Settings{Certificates: []Pair{{first.CertFile, first.KeyFile}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, _, stop := watch(t, st)
	watching(t, st)
	log, err := os.Create(filepath.Join(dir, "access.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-time.After(2 * time.Millisecond): // a tenth of the debounce
				fmt.Fprintln(log, `{"status":200}`)
			}
		}
	}()
	defer func() { close(quit); <-done }()
	second := ca.Server("s.pem", "s.key", "gw.test")
	waitSerial(t, addr, ca, second.Serial)
	stop()
}
