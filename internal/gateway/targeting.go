package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/geo"
	"github.com/graygate/graygate/internal/match"
	"github.com/graygate/graygate/internal/tags"
)

// targeting holds the region and tag resolvers that one config describes.
// They are rebuilt only when the targeting section changes, or what they
// read besides it (inputs), and closed once no snapshot uses them.
type targeting struct {
	cfg config.Targeting
	src *match.Sources
	// inputs digests what the sources read outside the config, as it was
	// before they were built (readInputs).
	inputs string
}

func newTargeting(cfg config.Targeting, logger *slog.Logger) (*targeting, error) {
	// Read before the sources read it: a file replaced in between is read
	// again at the next reload, never missed.
	t := &targeting{cfg: cfg, src: &match.Sources{}, inputs: readInputs(cfg)}
	if cfg.Region != nil {
		g, err := geo.New(*cfg.Region, logger.With("component", "geo"))
		if err != nil {
			return nil, fmt.Errorf("targeting.region: %w", err)
		}
		t.src.Geo = g
	}
	if cfg.Tags != nil {
		tc := *cfg.Tags
		if tc.JWT != nil && tc.JWT.PhoneClaim == "" && cfg.Region != nil && cfg.Region.PhoneClaim != "" {
			// The region's phone claim is read from the verified token,
			// which the tag sources own.
			j := *tc.JWT
			j.PhoneClaim = cfg.Region.PhoneClaim
			tc.JWT = &j
		}
		r, err := tags.New(tc, logger.With("component", "tags"))
		if err != nil {
			t.close()
			return nil, fmt.Errorf("targeting.tags: %w", err)
		}
		t.src.Tags = r
	}
	return t, nil
}

// readInputs digests what cfg's sources read besides the config when they
// are built: the JWT key files and the secrets named by environment
// variables. The GeoIP database is left out: it is watched, and reloaded
// when it changes (watch).
func readInputs(cfg config.Targeting) string {
	h := sha256.New()
	file := func(p string) {
		if p == "" {
			return
		}
		b, err := os.ReadFile(p)
		fmt.Fprintf(h, "file %q %d %v\n", p, len(b), err)
		h.Write(b)
	}
	env := func(name string) {
		if name != "" {
			v := os.Getenv(name)
			fmt.Fprintf(h, "env %q %d\n%s", name, len(v), v)
		}
	}
	if c := cfg.Tags; c != nil {
		if j := c.JWT; j != nil {
			file(j.HS256SecretFile)
			file(j.PublicKeyFile)
			file(j.JWKSFile)
			file(j.JWKSCAFile)
			env(j.HS256SecretEnv)
		}
		if r := c.Redis; r != nil {
			env(r.PasswordEnv)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// inputsChanged reports whether what t's sources read besides the config
// has changed since they were built.
func (t *targeting) inputsChanged() bool { return readInputs(t.cfg) != t.inputs }

// watch reloads the GeoIP database when its file changes, until ctx ends.
func (t *targeting) watch(ctx context.Context) error {
	if t.src.Geo == nil || t.cfg.Region.GeoIPPath == "" {
		return nil
	}
	return t.src.Geo.Watch(ctx)
}

func (t *targeting) close() error {
	var errs []error
	if t.src.Geo != nil {
		errs = append(errs, t.src.Geo.Close())
	}
	if t.src.Tags != nil {
		errs = append(errs, t.src.Tags.Close())
	}
	return errors.Join(errs...)
}

// redisStats reads the tag store's counters for the metrics.
func (t *targeting) redisStats() tags.Stats {
	if t == nil || t.src.Tags == nil || t.src.Tags.Redis() == nil {
		return tags.Stats{}
	}
	return t.src.Tags.Redis().Stats()
}
