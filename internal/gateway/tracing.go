package gateway

import (
	"context"
	"log/slog"
	"time"

	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/tracing"
)

// newTracer builds the tracer of the config's tracing section; nil (off)
// without one. The section needs a restart (config.Fields): the tracer
// the process starts with serves until it stops.
func newTracer(cfg *config.Config, version string, log *slog.Logger) (*tracing.Tracer, error) {
	t := cfg.Tracing
	if t == nil {
		return nil, nil
	}
	return tracing.New(tracing.Options{Endpoint: t.OTLPEndpoint, SampleRatio: *t.SampleRatio, ServiceName: t.ServiceName, ServiceVersion: version, Logger: log})
}

// Tracer returns the gateway's tracer, nil when tracing is off: the data
// plane starts one server span per request with it (see package tracing).
func (g *Gateway) Tracer() *tracing.Tracer { return g.tracer }

// shutdownTracer exports the spans left, within a few seconds.
func (g *Gateway) shutdownTracer() {
	if g.tracer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.tracer.Shutdown(ctx); err != nil {
		g.log.Error("flush the last spans", "err", err)
	}
}
