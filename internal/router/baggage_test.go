package router

import (
	"testing"

	"github.com/graygate/graygate/internal/rule"
)

// TestBaggageColoring: with trust_gray_tag, a trusted peer's baggage
// gray.tag colors the request as X-Gray-Tag does; X-Gray-Tag wins when both
// are sent; anyone else's is ignored.
func TestBaggageColoring(t *testing.T) {
	gray := compile(t, `{"key":"g","type":"gray","gray_percent":0,"targets":{"gray":"gray","stable":"stable"},"target_tags":{"gray":"v2.1"}}`)
	honour := build(t, Input{Rules: []*rule.Compiled{gray}, TrustGrayTag: true})
	off := build(t, Input{Rules: []*rule.Compiled{gray}})
	tests := []struct {
		name               string
		s                  *Snapshot
		trusted            bool
		headers            []string
		wantGroup, wantTag string
		ignored            string
	}{
		{"trusted peer", honour, true, []string{"baggage", "userId=a, gray.tag=v2.1;p=1"}, GroupGray, "v2.1", ""},
		{"percent-encoded", honour, true, []string{"baggage", "gray.tag=v2%2E1"}, GroupGray, "v2.1", ""},
		{"untrusted peer", honour, false, []string{"baggage", "gray.tag=v2.1"}, GroupDefault, "", "v2.1"},
		{"trust_gray_tag off", off, true, []string{"baggage", "gray.tag=v2.1"}, GroupDefault, "", ""},
		{"X-Gray-Tag wins", honour, true, []string{"baggage", "gray.tag=v2.1", "X-Gray-Tag", "other"}, GroupDefault, "other", ""},
		{"no gray.tag member", honour, true, []string{"baggage", "userId=a"}, GroupDefault, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := get("/", append([]string{"X-User-Id", "1"}, tt.headers...)...)
			r.Trusted = tt.trusted
			var tr Trace
			d := tt.s.Decide(r, &tr)
			if d.Group != tt.wantGroup || d.Tag != tt.wantTag || tr.IgnoredColor != tt.ignored {
				t.Errorf("Decide = group %q tag %q ignored %q, want %q %q %q", d.Group, d.Tag, tr.IgnoredColor, tt.wantGroup, tt.wantTag, tt.ignored)
			}
			if live := tt.s.Decide(r, nil); live != d {
				t.Errorf("live %+v differs from explained %+v", live, d)
			}
		})
	}
}
