package gateway

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/logfile"
)

// accessLog returns where the access log goes: the embedder's writer, or
// the file the gateway opened (nil if none).
func (g *Gateway) accessLog() io.Writer {
	if g.opts.AccessLog != nil {
		return g.opts.AccessLog
	}
	if g.alog == nil {
		return nil
	}
	return g.alog
}

// accessLogFor returns where the data plane writes the access log under
// cfg: nowhere when it is off. The file must be open (openAccessLog).
func (g *Gateway) accessLogFor(cfg *config.Config) io.Writer {
	if !cfg.AccessLog.Enabled {
		return nil
	}
	return g.accessLog()
}

// openAccessLog opens access_log.path when the access log is on and the
// gateway owns it, or switches the open writer to a changed path. A path
// that cannot be opened is an error and changes nothing. The caller holds
// g.mu, or is New.
func (g *Gateway) openAccessLog(cfg *config.Config) error {
	if g.opts.AccessLog != nil || !cfg.AccessLog.Enabled {
		return nil
	}
	if g.alog == nil {
		w, err := logfile.Open(cfg.AccessLog.Path, logfile.Options{Stdout: g.opts.Stdout, Stderr: g.opts.Stderr, Logger: g.log.With("log", "access_log")})
		if err != nil {
			return fmt.Errorf("access_log.path: %w", err)
		}
		g.alog = w
		return nil
	}
	if err := g.alog.SetPath(cfg.AccessLog.Path); err != nil {
		return fmt.Errorf("access_log.path: %w", err)
	}
	return nil
}

// dropAccessLog closes the file the gateway opened for the access log once
// a reload has turned the log off, so that a file logrotate deleted is
// freed; a later reload that turns it on opens the file again. It is
// called after the data plane took the new options: proxy.Reconfigure has
// drained and stopped the writer over the file, and a request that still
// holds that writer only has its line dropped, never written to the file
// (a write that comes in after all, because draining timed out, gets
// os.ErrClosed from the logfile.Writer). The caller holds g.mu.
func (g *Gateway) dropAccessLog(cfg *config.Config) {
	if cfg.AccessLog.Enabled || g.alog == nil {
		return
	}
	w := g.alog
	g.alog = nil
	if err := w.Close(); err != nil {
		g.log.Error("close the access log", "path", w.Path(), "err", err)
	}
}

// ReopenAccessLog reopens the access log file under its name, so that a
// log rotator that renamed it away (and then signals graygate with
// SIGUSR1) sees no further writes to the renamed file. It does nothing when
// the access log is off or goes to a standard stream or to
// Options.AccessLog.
func (g *Gateway) ReopenAccessLog() error {
	g.mu.Lock()
	w := g.alog
	g.mu.Unlock()
	if w == nil {
		return nil
	}
	if err := w.Reopen(); err != nil {
		if errors.Is(err, os.ErrClosed) {
			return nil // a reload turned the log off meanwhile
		}
		return fmt.Errorf("reopen the access log: %w", err)
	}
	g.log.Info("access log reopened", "path", w.Path())
	return nil
}

func (g *Gateway) closeAccessLog() error {
	g.mu.Lock()
	w := g.alog
	g.mu.Unlock()
	if w == nil {
		return nil
	}
	return w.Close()
}
