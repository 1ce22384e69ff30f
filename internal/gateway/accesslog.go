package gateway

import (
	"fmt"
	"io"

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

// openAccessLog opens access_log.path when the access log is on and the
// gateway owns it, or switches the open writer to a changed path. A path
// that cannot be opened is an error and changes nothing. The caller holds
// g.mu, or is New.
func (g *Gateway) openAccessLog(cfg *config.Config) error {
	if g.opts.AccessLog != nil || !cfg.AccessLog.Enabled {
		return nil
	}
	if g.alog == nil {
		w, err := logfile.Open(cfg.AccessLog.Path, logfile.Options{Stdout: g.opts.Stdout, Stderr: g.opts.Stderr})
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

// ReopenAccessLog reopens the access log file under its name, so that a
// log rotator that renamed it away (and then signals graygate with
// SIGUSR1) sees no further writes to the renamed file. It does nothing when
// the access log goes to a standard stream or to Options.AccessLog.
func (g *Gateway) ReopenAccessLog() error {
	g.mu.Lock()
	w := g.alog
	g.mu.Unlock()
	if w == nil {
		return nil
	}
	if err := w.Reopen(); err != nil {
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
