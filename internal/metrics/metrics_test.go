package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/upstream"
)

func TestObserveAndExpose(t *testing.T) {
	m := New()
	d := &router.Decision{Rule: "gray_v2", Group: "gray", Target: upstream.NewPool("gray", nil)}
	for i := 0; i < 3; i++ {
		m.Observe(d, 200, 3*time.Millisecond)
	}
	m.Observe(&router.Decision{Rule: "gray_v2", Group: "stable", Degraded: "rollback", Target: upstream.NewPool("stable", nil)}, 503, time.Millisecond)
	m.Reloaded("ok", 42)
	m.SetRollback(true, map[string]bool{"gray_v2": true})
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`graygate_requests_total{code="2xx",group="gray",rule="gray_v2",upstream="gray"} 3`,
		`graygate_requests_total{code="5xx",group="stable",rule="gray_v2",upstream="stable"} 1`,
		`graygate_degraded_requests_total{reason="rollback",rule="gray_v2"} 1`,
		`graygate_request_duration_seconds_count{group="gray",rule="gray_v2"} 3`,
		`graygate_ruleset_revision 42`,
		`graygate_reloads_total{result="ok"} 1`,
		`graygate_rollback_active{rule="_global"} 1`,
		`graygate_rollback_active{rule="gray_v2"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestObserveDoesNotAllocateOnceSeen(t *testing.T) {
	m := New()
	d := &router.Decision{Rule: "r", Group: "g", Target: upstream.NewPool("p", nil)}
	m.Observe(d, 200, time.Millisecond)
	if a := testing.AllocsPerRun(100, func() { m.Observe(d, 200, time.Millisecond) }); a != 0 {
		t.Errorf("Observe allocates %v times per request", a)
	}
}

func BenchmarkObserve(b *testing.B) {
	m := New()
	d := &router.Decision{Rule: "r", Group: "g", Target: upstream.NewPool("p", nil)}
	b.ReportAllocs()
	for b.Loop() {
		m.Observe(d, 200, time.Millisecond)
	}
}

func TestMirrors(t *testing.T) {
	m := New()
	m.Mirrors(func() []MirrorStats { return []MirrorStats{{Rule: "user_v2", Sent: 7, Failed: 2, Dropped: 3}} })
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`graygate_mirror_sent_total{rule="user_v2"} 7`,
		`graygate_mirror_failed_total{rule="user_v2"} 2`,
		`graygate_mirror_dropped_total{rule="user_v2"} 3`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestAccessLogDroppedNeverGoesDown: the data plane's count of dropped
// access log lines starts over when a reload turns the log off (0) and on
// again (a new writer); the exported counter adds what it grew by and never
// goes down.
func TestAccessLogDroppedNeverGoesDown(t *testing.T) {
	m := New()
	var dropped uint64
	m.AccessLog(func() uint64 { return dropped })
	tests := []struct {
		name    string
		dropped uint64
		want    string
	}{
		{"none yet", 0, "0"},
		{"queue full", 7, "7"},
		{"more", 10, "10"},
		{"log turned off", 0, "10"},
		{"turned on: a new writer", 4, "14"},
		{"it drops more", 6, "16"},
	}
	for _, tt := range tests {
		dropped = tt.dropped
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, _ := io.ReadAll(rec.Body)
		if want := "\ngraygate_access_log_dropped_total " + tt.want + "\n"; !strings.Contains(string(body), want) {
			t.Errorf("%s (the data plane counts %d): want %q in\n%s", tt.name, tt.dropped, strings.TrimSpace(want), body)
		}
	}
}

// TestRetiredRuleSkipsCachedChild: a request of a rule whose series were
// deleted is counted as late even when its series' children were in the
// recent cache (two requests put them there), and the series stay gone.
func TestRetiredRuleSkipsCachedChild(t *testing.T) {
	m := New()
	m.SetRetireGrace(time.Millisecond)
	d := &router.Decision{Rule: "r", Group: "g", Target: upstream.NewPool("p", nil)}
	m.SetRules([]string{"r"})
	m.Observe(d, 200, time.Millisecond)
	m.Observe(d, 200, time.Millisecond)
	m.SetRules(nil)
	expose := func() string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		b, _ := io.ReadAll(rec.Body)
		return string(b)
	}
	deadline := time.Now().Add(5 * time.Second)
	for strings.Contains(expose(), `rule="r"`) {
		if time.Now().After(deadline) {
			t.Fatal("the rule's series were not deleted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	m.Observe(d, 200, time.Millisecond)
	body := expose()
	if !strings.Contains(body, `graygate_retired_rule_requests_total{code="2xx"} 1`) {
		t.Errorf("the request after the retirement is not counted as late")
	}
	if strings.Contains(body, `rule="r"`) {
		t.Errorf("the retired rule's series came back")
	}
}
