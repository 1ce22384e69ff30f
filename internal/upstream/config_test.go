package upstream

import (
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/strict"
)

func TestConfigDecode(t *testing.T) {
	tests := []struct {
		name, json string
		want       Config
		err        string
	}{
		{name: "empty", json: `{}`},
		{
			name: "everything",
			json: `{"balancer":"weighted","version_header":"X-Version",
				"passive_health":{"consecutive_failures":3,"base_ejection":"5s","max_ejection":"1m"},
				"active_health":{"path":"/ready","interval":"2s","timeout":"500ms","healthy_threshold":1,"unhealthy_threshold":2}}`,
			want: Config{
				Balancer: Weighted, VersionHeader: "X-Version",
				PassiveHealth: &PassiveHealth{ConsecutiveFailures: 3, BaseEjection: Duration(5 * time.Second), MaxEjection: Duration(time.Minute)},
				ActiveHealth: &ActiveHealth{Path: "/ready", Interval: Duration(2 * time.Second), Timeout: Duration(500 * time.Millisecond),
					HealthyThreshold: 1, UnhealthyThreshold: 2},
			},
		},
		{name: "version header true", json: `{"version_header":true}`, want: Config{VersionHeader: "version"}},
		{name: "version header false", json: `{"version_header":false}`, want: Config{}},
		{name: "empty objects turn health on", json: `{"passive_health":{},"active_health":{}}`, want: Config{PassiveHealth: &PassiveHealth{}, ActiveHealth: &ActiveHealth{}}},
		{name: "unknown key", json: `{"passive_health":{"consecutive_errors":3}}`, err: "passive_health.consecutive_errors: unknown field"},
		{name: "version header number", json: `{"version_header":1}`, err: "version_header: expected true, false or a header name"},
		{name: "bad duration", json: `{"active_health":{"interval":"soon"}}`, err: `active_health.interval: expected a non-negative duration such as "500ms" or "30s", got "soon"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Config
			err := strict.Decode([]byte(tt.json), &c)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Decode(%s) error = %v, want %q", tt.json, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode(%s): %v", tt.json, err)
			}
			if !equalConfig(c, tt.want) {
				t.Errorf("Decode(%s) = %+v, want %+v", tt.json, c, tt.want)
			}
			if err := c.Validate("upstreams.u"); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

func equalConfig(a, b Config) bool {
	if a.Balancer != b.Balancer || a.VersionHeader != b.VersionHeader {
		return false
	}
	if (a.PassiveHealth == nil) != (b.PassiveHealth == nil) || (a.ActiveHealth == nil) != (b.ActiveHealth == nil) {
		return false
	}
	if a.PassiveHealth != nil && *a.PassiveHealth != *b.PassiveHealth {
		return false
	}
	return a.ActiveHealth == nil || *a.ActiveHealth == *b.ActiveHealth
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		c    Config
		want []string // every path-named problem, in order
	}{
		{name: "zero", c: Config{}},
		{name: "balancers", c: Config{Balancer: LeastRequest, VersionHeader: "x-canary"}},
		{name: "unknown balancer", c: Config{Balancer: "random"},
			want: []string{`upstreams.u.balancer: unknown balancer "random" (want "round_robin", "weighted" or "least_request")`}},
		{name: "header not a token", c: Config{VersionHeader: "x version"},
			want: []string{`upstreams.u.version_header: "x version" is not a valid header name`}},
		{name: "passive out of range", c: Config{PassiveHealth: &PassiveHealth{ConsecutiveFailures: -1, BaseEjection: Duration(2 * time.Hour), MaxEjection: Duration(25 * time.Hour)}},
			want: []string{
				"upstreams.u.passive_health.consecutive_failures: must be 1..1000, got -1",
				"upstreams.u.passive_health.base_ejection: must be 1ms..1h0m0s, got 2h0m0s",
				"upstreams.u.passive_health.max_ejection: must be 1ms..24h0m0s, got 25h0m0s",
			}},
		{name: "max below base", c: Config{PassiveHealth: &PassiveHealth{BaseEjection: Duration(time.Minute), MaxEjection: Duration(time.Second)}},
			want: []string{"upstreams.u.passive_health.max_ejection: must not be less than base_ejection (1m0s), got 1s"}},
		{name: "base above the default max raises it", c: Config{PassiveHealth: &PassiveHealth{BaseEjection: Duration(10 * time.Minute)}}},
		{name: "active out of range", c: Config{ActiveHealth: &ActiveHealth{Path: "healthz", Interval: Duration(time.Millisecond), Timeout: Duration(2 * time.Minute), HealthyThreshold: 101, UnhealthyThreshold: -1}},
			want: []string{
				`upstreams.u.active_health.path: must start with "/" and contain no spaces or control characters, got "healthz"`,
				"upstreams.u.active_health.interval: must be 10ms..1h, got 1ms",
				"upstreams.u.active_health.timeout: must be 1ms..1m0s, got 2m0s",
				"upstreams.u.active_health.healthy_threshold: must be 1..100, got 101",
				"upstreams.u.active_health.unhealthy_threshold: must be 1..100, got -1",
			}},
		{name: "path with a space", c: Config{ActiveHealth: &ActiveHealth{Path: "/a b"}},
			want: []string{`upstreams.u.active_health.path: must start with "/" and contain no spaces or control characters, got "/a b"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, f := range strict.Fields(tt.c.Validate("upstreams.u")) {
				got = append(got, f.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("Validate =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestConfigOptions(t *testing.T) {
	var c Config
	if err := strict.Decode([]byte(`{"balancer":"least_request","version_header":true,"passive_health":{"consecutive_failures":2},"active_health":{"interval":"1h"}}`), &c); err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	h := NewHealth(HealthOptions{Now: clk.Now})
	defer h.Close()
	p, err := NewPoolWith("svc", []*Instance{{Addr: "127.0.0.1:1"}, {Addr: "127.0.0.1:2"}}, c.Options(h))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.VersionHeader != "version" || p.Stats().Balancer != LeastRequest || h.ProbeLoops() != 2 {
		t.Errorf("pool from config: header %q, %+v, %d loops", p.VersionHeader, p.Stats(), h.ProbeLoops())
	}
	fail(p, p.Instances[0], 2)
	if st := p.Stats(); st.Ejected != 1 {
		t.Errorf("consecutive_failures 2 did not eject: %+v", st)
	}
	if a := p.active; a.path != DefaultProbePath || a.timeout != DefaultProbeTimeout || a.healthy != 2 || a.unhealthy != 3 {
		t.Errorf("active defaults = %+v", a)
	}
	if pc := p.passive; pc.base != DefaultBaseEjection || pc.max != DefaultMaxEjection {
		t.Errorf("passive defaults = %+v", pc)
	}
	// Without a registry (graygate validate) nothing is probed.
	q, err := NewPoolWith("svc", []*Instance{{Addr: "127.0.0.1:3"}}, c.Options(nil))
	if err != nil || q.active != nil || q.passive == nil {
		t.Errorf("Options(nil) pool = %+v, %v; want passive only", q, err)
	}
}
