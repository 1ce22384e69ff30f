package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/geo"
	"github.com/graygate/graygate/internal/match"
	"github.com/graygate/graygate/internal/tags"
)

// targeting holds the region and tag resolvers that one config describes.
// They are rebuilt only when the targeting section changes, and closed once
// no snapshot uses them.
type targeting struct {
	cfg config.Targeting
	src *match.Sources
}

func newTargeting(cfg config.Targeting, logger *slog.Logger) (*targeting, error) {
	t := &targeting{cfg: cfg, src: &match.Sources{}}
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
