package mirror

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/bucket"
	"github.com/graygate/graygate/internal/upstream"
)

// Defaults of a rule's mirror field.
const (
	// DefaultMaxBody is the largest request body mirrored (64 KiB); a
	// request with a larger body is not mirrored.
	DefaultMaxBody = 64 << 10
	// DefaultHostSuffix is appended to the mirrored request's host
	// (Envoy's convention): "api.example.com:8080" becomes
	// "api.example.com-shadow:8080".
	DefaultHostSuffix = "-shadow"
)

// DefaultMethods are the methods mirrored when a rule names none: the safe
// ones, so that side effects are off by default, as in Diffy.
var DefaultMethods = []string{"GET", "HEAD"}

// SpecConfig is what NewSpec compiles: a gray rule's mirror field with its
// targets resolved. The rule package validates the field and fills it in.
type SpecConfig struct {
	// Rule is the key of the gray rule the mirror belongs to.
	Rule string
	// Target is where shadow copies go (the candidate); TargetName is the
	// target as the rule wrote it.
	Target     *upstream.Pool
	TargetName string
	// Secondary, when set, is a second instance of the stable version that
	// gets the same copies; primary-vs-secondary differences are noise.
	Secondary     *upstream.Pool
	SecondaryName string
	// Percent is the share of the rule's stable users mirrored, 0..100.
	Percent float64
	// Methods are the methods mirrored (nil: DefaultMethods).
	Methods []string
	// MaxBody is the largest request body mirrored, in bytes.
	MaxBody int64
	// HostSuffix is appended to the host of the mirrored request ("" keeps it).
	HostSuffix string
	// Diff turns on the comparison of answers; Ignore lists the paths it
	// skips (see ParseIgnore).
	Diff   bool
	Ignore []string
}

// Spec is a gray rule's compiled mirror. It belongs to a rule snapshot: it
// must not be modified after publication and is safe for concurrent use.
// The router puts it in a decision (router.Decision.Mirror) when a request
// is to be mirrored; the data plane hands it back to Set.Mirror.
type Spec struct {
	// Rule is the rule's key, the label of the mirror metrics.
	Rule string
	// Key names the mirror's state in a Set: the rule, its targets and its
	// ignore list. The diff statistics start over when any of them changes.
	Key string
	// Target and Secondary are the candidate and (optional) noise pools.
	Target, Secondary         *upstream.Pool
	TargetName, SecondaryName string
	// Percent is the share of the rule's stable users mirrored.
	Percent float64
	// Methods are the mirrored methods.
	Methods []string
	// MaxBody is the largest request body mirrored.
	MaxBody int64
	// HostSuffix is appended to the mirrored request's host.
	HostSuffix string
	// Diff says answers are compared; Ignore is the compiled ignore list.
	Diff   bool
	Ignore *Ignore

	gate      *bucket.Hasher
	threshold uint64
	// state is set by Set.Sync before the snapshot holding the spec is
	// published; atomic because a spec reused by the next snapshot is
	// synced again while requests read it.
	state atomic.Pointer[state]
}

// Salt returns the salt of the mirror's bucket: the rule key followed by
// ":mirror", so that who is mirrored is independent of who is gray (with
// the gray gate's own salt, mirroring 10% would pick the users that are
// already gray and mirror nobody).
func Salt(rule string) string { return rule + ":mirror" }

// NewSpec compiles c. Percent and MaxBody must be valid (the rule package
// checks them with path-named errors); an invalid ignore path is an error.
func NewSpec(c SpecConfig) (*Spec, error) {
	if c.Target == nil {
		return nil, errors.New("mirror target is required")
	}
	if math.IsNaN(c.Percent) || c.Percent < 0 || c.Percent > 100 {
		return nil, fmt.Errorf("mirror percent must be 0..100, got %v", c.Percent)
	}
	ign, err := ParseIgnore(c.Ignore)
	if err != nil {
		return nil, err
	}
	methods := DefaultMethods
	if c.Methods != nil {
		// Upper case: every method the listeners accept is (the HTTP/1
		// listener refuses "get" with 400), so a rule's "get" can only
		// mean GET, and taken as written it would mirror nothing.
		methods = make([]string, 0, len(c.Methods))
		for _, m := range c.Methods {
			if m = strings.ToUpper(m); !slices.Contains(methods, m) {
				methods = append(methods, m)
			}
		}
	}
	s := &Spec{
		Rule: c.Rule, Target: c.Target, TargetName: c.TargetName, Secondary: c.Secondary, SecondaryName: c.SecondaryName,
		Percent: c.Percent, Methods: slices.Clone(methods), MaxBody: c.MaxBody, HostSuffix: c.HostSuffix,
		Diff: c.Diff, Ignore: ign,
		gate:      bucket.New(bucket.XXH64, Salt(c.Rule)),
		threshold: bucket.XXH64.Threshold(int(math.Round(c.Percent * 100))),
	}
	s.Key = c.Rule + "|" + c.TargetName + "|" + c.SecondaryName + "|" + strconv.FormatBool(c.Diff) + "|" + strings.Join(ign.paths, ",")
	return s, nil
}

// Selects reports whether a request of method by uid is mirrored: the
// method is one of Methods, and the user's mirror bucket,
// xxh64(Salt(rule) + ":" + uid) % 10000, is below Percent × 100, so a user
// is mirrored consistently. It does not allocate.
func (s *Spec) Selects(method, uid string) bool {
	if !slices.Contains(s.Methods, method) || s.threshold == 0 {
		return false
	}
	return bucket.XXH64.Everyone(s.threshold) || s.gate.Bucket(uid) < s.threshold
}

// Bucket returns the user's mirror bucket and the threshold it is compared
// with, for explain.
func (s *Spec) Bucket(uid string) (b, threshold uint64) { return s.gate.Bucket(uid), s.threshold }

// ValidMethod reports whether m is a method token (RFC 9110 section 9.1).
func ValidMethod(m string) bool { return attr.ValidToken(m) }
