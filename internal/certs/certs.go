// Package certs holds the data plane's TLS server configuration: the
// certificates, chosen by SNI, the minimum version and the client CAs for
// mTLS, reloaded when their files change.
//
// A Store builds a complete *tls.Config from the files and publishes it
// with one atomic pointer store; the listener's tls.Config asks for it in
// GetConfigForClient, so every new handshake uses the newest one and an
// established connection keeps the one it was made with: a rotation never
// drops a connection. A reload that fails (a file missing, a key that does
// not match its certificate, a half-written file) keeps the old
// configuration serving and is logged; the next change of the files tries
// again.
//
// SNI: the first certificate whose names (or wildcard names) cover the
// server name the client asked for, and whose key the client supports,
// serves it; a client that names no server, or one no certificate covers,
// gets the first certificate. That is crypto/tls's own choice among
// Config.Certificates, which the built configuration uses as it is.
package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/graygate/graygate/internal/fswatch"
)

// Pair is one certificate (chain) and its private key, as PEM files.
type Pair struct {
	CertFile string
	KeyFile  string
}

// Settings is what a Store builds its configuration from.
type Settings struct {
	// Certificates are tried in order for SNI; the first is the default.
	Certificates []Pair
	// MinVersion is tls.VersionTLS12 or tls.VersionTLS13 (0: TLS 1.2).
	MinVersion uint16
	// ClientCAFile, when set, turns on mTLS: a client must present a
	// certificate signed by one of its CAs, or the handshake fails.
	ClientCAFile string
	// NextProtos are offered by ALPN, in order of preference.
	NextProtos []string
}

// Store is the data plane's current TLS configuration. It is safe for
// concurrent use.
type Store struct {
	log *slog.Logger

	mu       sync.Mutex // serialises loads
	settings Settings
	// files are the contents the current configuration was built from,
	// by path, so a change event that changed nothing is ignored.
	files map[string][]byte
	cur   atomic.Pointer[tls.Config]
	// base is the listener's configuration, which only points at cur.
	base *tls.Config
	// loads counts successful loads, for tests and logs.
	loads atomic.Uint64
	// updated tells Watch that Update replaced the settings, whose files
	// may be in directories it does not watch yet.
	updated chan struct{}
}

// New loads s. Every problem is an error naming the file.
func New(s Settings, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	st := &Store{log: logger.With("component", "tls"), updated: make(chan struct{}, 1)}
	if err := st.Update(s); err != nil {
		return nil, err
	}
	st.base = &tls.Config{
		// crypto/tls takes the configuration of each handshake from here;
		// the values below only apply if that fails.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return st.cur.Load(), nil },
		MinVersion:         tls.VersionTLS12,
		NextProtos:         s.NextProtos,
	}
	return st, nil
}

// Config returns the configuration a listener terminates TLS with. It
// stays the same pointer across reloads: each handshake asks it for the
// current configuration.
func (st *Store) Config() *tls.Config { return st.base }

// Current returns the configuration new handshakes use now.
func (st *Store) Current() *tls.Config { return st.cur.Load() }

// Loads returns how many times the files were loaded successfully.
func (st *Store) Loads() uint64 { return st.loads.Load() }

// Update replaces the settings (a config reload) and loads them. On error
// the previous configuration keeps serving.
func (st *Store) Update(s Settings) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	files, conf, err := build(s)
	if err != nil {
		return err
	}
	st.settings, st.files = s, files
	st.cur.Store(conf)
	st.loads.Add(1)
	select {
	case st.updated <- struct{}{}:
	default:
	}
	return nil
}

// Reload reads the files again and, if any changed, builds and publishes
// a new configuration. It reports whether it did.
func (st *Store) Reload() (bool, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.settings
	same := true
	for _, p := range paths(s) {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(b, st.files[p]) {
			same = false
			break
		}
	}
	if same {
		return false, nil
	}
	files, conf, err := build(s)
	if err != nil {
		return false, err
	}
	st.files = files
	st.cur.Store(conf)
	st.loads.Add(1)
	return true, nil
}

// Watch reloads the files whenever one of them changes, at most once per
// debounce, until ctx ends. It watches directories rather than the files,
// so that files replaced by a rename are seen, and it follows symbolic
// links: for each file it watches the directory of every link met while
// resolving the configured path, in any component, and the directory of
// the file the path ends at. An event reloads when it names one of those
// links, that file or a watched directory itself; other files of the
// directories are left alone, so that a busy neighbour (a log written
// beside the certificates) cannot keep the debounce from ever ending.
// That covers the layouts certificate managers keep:
//   - certbot: live/example.com/fullchain.pem links to
//     ../../archive/example.com/fullchain3.pem. A renewal writes
//     fullchain4.pem and re-points the link (an event in live/); a tool
//     that rewrites the target in place is seen in archive/.
//   - Kubernetes Secret and ConfigMap volumes: tls.crt links to
//     ..data/tls.crt and ..data to a timestamped directory; an update
//     renames a new ..data over the old one, and no event names tls.crt.
//   - an operator's own link (/etc/graygate/tls/api.pem) to either.
//
// Before every reload the links are resolved again and the watches moved
// to where they lead now (a directory no longer on any path is dropped);
// only then are the files read, so that a change made after the read is
// an event again. A link missing for a moment (removed, then made again)
// is watched for in its directory.
// Directories that Update adds are watched as soon as it returns. Once
// its watches are in place, at the start and after every Update, Watch
// reads the files again, so that a change made before it could see
// events is not lost. An
// error of the watcher (the kernel's event queue overflowed, and changes
// may have gone unseen) is logged and taken for a change: the watch goes
// on, so that a burst of file activity does not end the reloads for good.
func (st *Store) Watch(ctx context.Context, debounce time.Duration) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch TLS files: %w", err)
	}
	defer w.Close()
	// relevant holds the names whose events reload (see fswatch.Follow).
	var relevant map[string]bool
	follow := func() (err error) {
		st.mu.Lock()
		ps := paths(st.settings)
		st.mu.Unlock()
		relevant, err = fswatch.Follow(w, ps)
		return err
	}
	if err := follow(); err != nil {
		return err
	}
	var timer *time.Timer
	var fire <-chan time.Time
	changed := func() {
		if timer == nil {
			timer = time.NewTimer(debounce)
		} else {
			timer.Reset(debounce)
		}
		fire = timer.C
	}
	// A renewal written after New or Update read the files but before
	// the watches above existed raised no event here: the files are read
	// once now that they are watched, and reloaded only if they differ
	// from what serves.
	changed()
	for {
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if fswatch.Relevant(relevant, ev) {
				changed()
			}
		case <-st.updated:
			if err := follow(); err != nil {
				st.log.Error("watch TLS files", "err", err)
			}
			changed() // as at the start, for directories watched only now
		case <-fire:
			fire = nil
			if err := follow(); err != nil {
				st.log.Error("watch TLS files", "err", err)
			}
			changed, err := st.Reload()
			switch {
			case err != nil:
				st.log.Error("TLS files not reloaded; the previous certificates keep serving", "err", err)
			case changed:
				st.log.Info("TLS files reloaded", "loads", st.loads.Load())
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			st.log.Warn("watch TLS files: events may have been missed; the files are read again", "err", err)
			changed()
		}
	}
}

// paths lists the files s reads.
func paths(s Settings) []string {
	var out []string
	for _, p := range s.Certificates {
		out = append(out, p.CertFile, p.KeyFile)
	}
	if s.ClientCAFile != "" {
		out = append(out, s.ClientCAFile)
	}
	return out
}

// build reads the files of s and makes the configuration of a handshake.
func build(s Settings) (map[string][]byte, *tls.Config, error) {
	if len(s.Certificates) == 0 {
		return nil, nil, errors.New("no certificates")
	}
	files := map[string][]byte{}
	read := func(p string) ([]byte, error) {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		files[p] = b
		return b, nil
	}
	conf := &tls.Config{MinVersion: s.MinVersion, NextProtos: s.NextProtos}
	if conf.MinVersion == 0 {
		conf.MinVersion = tls.VersionTLS12
	}
	var errs []error
	for i, p := range s.Certificates {
		c, err := loadPair(p, read)
		if err != nil {
			errs = append(errs, fmt.Errorf("certificates[%d]: %w", i, err))
			continue
		}
		conf.Certificates = append(conf.Certificates, c)
	}
	if s.ClientCAFile != "" {
		b, err := read(s.ClientCAFile)
		pool := x509.NewCertPool()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("client_ca_file: %w", err))
		case !pool.AppendCertsFromPEM(b):
			errs = append(errs, fmt.Errorf("client_ca_file: %s holds no PEM certificate", s.ClientCAFile))
		}
		conf.ClientCAs = pool
		conf.ClientAuth = tls.RequireAndVerifyClientCert
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return files, conf, nil
}

// loadPair reads a certificate and key and checks that they match and
// that the certificate parses, naming the files in every error.
func loadPair(p Pair, read func(string) ([]byte, error)) (tls.Certificate, error) {
	cb, err := read(p.CertFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("cert_file: %w", err)
	}
	kb, err := read(p.KeyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("key_file: %w", err)
	}
	c, err := tls.X509KeyPair(cb, kb)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("cert_file %s and key_file %s: %w", p.CertFile, p.KeyFile, err)
	}
	// Leaf is parsed by X509KeyPair since Go 1.23; SNI matching uses it.
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return tls.Certificate{}, fmt.Errorf("cert_file %s: %w", p.CertFile, err)
		}
	}
	return c, nil
}

// Check loads s once, without keeping it: what config validation asks.
func Check(s Settings) error {
	_, _, err := build(s)
	return err
}
