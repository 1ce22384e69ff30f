package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/attr"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/testport"
	"github.com/graygate/graygate/internal/upstream"
)

// TestABFallbackKeepsTheGroup: an experiment group whose upstream fails
// before answering is replayed on the control group's upstream, and the
// request stays in the group it was assigned: X-Gray-Group names it,
// X-Gray-Degraded says fallback, OnDone (the metrics) and the degradation
// record see it degraded in its own group, never as the control group; the
// control group's upstream gets the control group's X-Gray-Tag. A request
// assigned to the control group is untouched. Decisions come from the real
// router, requests go through the real listener.
func TestABFallbackKeepsTheGroup(t *testing.T) {
	control, _ := echoBackend(t, "a")
	down := testport.Refused(t)
	stable, _ := echoBackend(t, "stable")
	pools := map[string]*upstream.Pool{"a": poolOf("a", addrOf(control)), "b": poolOf("b", down), "stable": poolOf("stable", addrOf(stable))}
	rt := realRouter(t, pools, router.Input{}, `{"key":"exp","type":"ab","experiment_id":"e1","groups":[
		{"name":"A","weight":50,"target":"a","tag":"ctl","control":true},
		{"name":"B","weight":50,"target":"b","tag":"treat"}]}`)
	userIn := func(group string) string {
		for i := range 1000 {
			u := fmt.Sprint("user-", i)
			if rt.Decide(&attr.Map{Headers: map[string]string{"X-User-Id": u}}).Group == group {
				return u
			}
		}
		t.Fatalf("no user in group %s", group)
		return ""
	}
	var logged syncBuffer
	rec := newDoneRecorder()
	p := New(Options{OnDone: rec.onDone}, rt, slog.New(slog.NewJSONHandler(&logged, nil)))
	ln := listenLoopback(t)
	served := make(chan error, 1)
	go func() { served <- p.Serve(ln) }()
	c := httpClient(t)
	get := func(uid string) (*http.Response, echo) {
		req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/", nil)
		req.Header.Set("X-User-Id", uid)
		return getEcho(t, c, req)
	}

	resp, e := get(userIn("B"))
	for h, want := range map[string]string{"X-Gray-Rule": "exp", "X-Gray-Group": "B", "X-Gray-Degraded": "fallback"} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("group B user, fallback: %s = %q, want %q", h, got, want)
		}
	}
	if resp.StatusCode != 200 || e.Name != "a" {
		t.Errorf("group B user, fallback: %d from %q, want 200 from the control group's upstream a", resp.StatusCode, e.Name)
	}
	if got := e.Header.Values("X-Gray-Tag"); len(got) != 1 || got[0] != "ctl" {
		t.Errorf("the control group's upstream got X-Gray-Tag %q, want its own tag ctl", got)
	}
	d := rec.next(t, 5*time.Second)
	if d.group != "B" || d.degraded != "fallback" || d.target != "a" || d.intended != "b" || d.tag != "ctl" {
		t.Errorf("OnDone = %+v, want group B, degraded fallback, target a, intended b, tag ctl", d)
	}

	resp, e = get(userIn("A"))
	if resp.Header.Get("X-Gray-Group") != "A" || resp.Header.Get("X-Gray-Degraded") != "" || e.Name != "a" || e.Header.Get("X-Gray-Tag") != "ctl" {
		t.Errorf("group A user: group %q, degraded %q, from %q, tag %q; want A, not degraded, from a, ctl",
			resp.Header.Get("X-Gray-Group"), resp.Header.Get("X-Gray-Degraded"), e.Name, e.Header.Get("X-Gray-Tag"))
	}
	if d := rec.next(t, 5*time.Second); d.group != "A" || d.degraded != "" {
		t.Errorf("OnDone for group A = %+v, want group A, not degraded", d)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	for _, m := range jsonLines(t, logged.String()) {
		if m["msg"] == "degraded request" {
			recs = append(recs, m)
		}
	}
	if len(recs) != 1 {
		t.Fatalf("%d degradation records, want 1:\n%s", len(recs), logged.String())
	}
	want := map[string]any{"degraded": "fallback", "rule": "exp", "group": "B", "intended": "b", "actual": "a", "upstream": addrOf(control)}
	for k, v := range want {
		if recs[0][k] != v {
			t.Errorf("degradation record %s = %v, want %v", k, recs[0][k], v)
		}
	}
	if r, _ := recs[0]["reason"].(string); !strings.HasPrefix(r, `group "B" upstream "b" (`+down+`) unreachable before answering`) {
		t.Errorf("degradation record reason = %q", r)
	}
}
