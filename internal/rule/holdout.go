package rule

import (
	"math"

	"github.com/graygate/graygate/internal/bucket"
)

// GroupHoldout is the group of a request that the holdout kept out of every
// experiment; it is sent as X-Gray-Group.
const GroupHoldout = "holdout"

// DefaultHoldoutSalt salts the holdout bucket when the config names none.
const DefaultHoldoutSalt = "holdout"

// Holdout is the global holdout of config experiments.holdout: a user whose
// holdout bucket, xxh64(salt + ":" + uid) % 10000, is below percent×100 is
// claimed by no ab rule, in every layer and outside layers, so the holdout
// is one stable population against which the long-run effect of everything
// shipped can be measured. Gray and tag rules ignore it. A Holdout is
// immutable and safe for concurrent use; a nil *Holdout holds nobody.
type Holdout struct {
	Percent   float64
	Salt      string
	h         *bucket.Hasher
	threshold uint64
}

// NewHoldout returns the holdout of percent (0..100, at most two decimals;
// the config validates it) salted with salt ("" is "holdout"). A percent of
// 0 returns nil.
func NewHoldout(percent float64, salt string) *Holdout {
	if percent <= 0 {
		return nil
	}
	if salt == "" {
		salt = DefaultHoldoutSalt
	}
	return &Holdout{Percent: percent, Salt: salt, h: bucket.New(bucket.XXH64, salt),
		threshold: bucket.XXH64.Threshold(int(math.Round(percent * 100)))}
}

// Holds returns the user's holdout bucket and whether the user is held out.
func (h *Holdout) Holds(uid string) (uint64, bool) {
	if h == nil {
		return 0, false
	}
	b := h.h.Bucket(uid)
	return b, b < h.threshold
}

// Threshold returns the bucket bound: a user is held out when the holdout
// bucket is below it.
func (h *Holdout) Threshold() uint64 {
	if h == nil {
		return 0
	}
	return h.threshold
}
