package admin

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/graygate/graygate/internal/strict"
)

func TestDecodeRuleBody(t *testing.T) {
	tests := []struct {
		name, body, reason string
		errs               []string
	}{
		{"metadata ignored, reason kept", `{"type":"gray","version":3,"updated_by":"x","rolled_back":true,"reason":"why","gray_percent":1,"targets":{"gray":"h:1","stable":"h:2"}}`, "why", nil},
		{"key from the URL", `{"key":"k","type":"gray"}`, "", nil},
		{"key mismatch", `{"key":"other","type":"gray"}`, "", []string{`key: "other" does not match the key in the URL "k"`}},
		{"reason not a string", `{"reason":1}`, "", []string{"reason: expected a string"}},
		{"not an object", `[1]`, "", []string{"expected an object, got an array"}},
		{"bad json", `{"type":`, "", []string{"invalid JSON"}},
		{"unknown field", `{"type":"gray","gray_pct":1}`, "", []string{"gray_pct: unknown field"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, reason, err := decodeRuleBody([]byte(tt.body), "k")
			if len(tt.errs) == 0 {
				if err != nil || r.Key != "k" || reason != tt.reason {
					t.Fatalf("decode(%s) = %+v %q %v", tt.body, r, reason, err)
				}
				return
			}
			for _, want := range tt.errs {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("decode(%s) error = %v, want %q", tt.body, err, want)
				}
			}
		})
	}
}

func TestParseIfMatch(t *testing.T) {
	tests := []struct {
		h    string
		want int64
		err  bool
	}{{"", -1, false}, {"*", -1, false}, {"3", 3, false}, {`"7"`, 7, false}, {`W/"7"`, 7, false}, {"0", 0, false}, {"abc", 0, true}, {"-2", 0, true}}
	for _, tt := range tests {
		r := httptest.NewRequest("PUT", "/", nil)
		if tt.h != "" {
			r.Header.Set("If-Match", tt.h)
		}
		got, err := parseIfMatch(r)
		if (err != nil) != tt.err || !tt.err && got != tt.want {
			t.Errorf("If-Match %q = %d %v, want %d (error %v)", tt.h, got, err, tt.want, tt.err)
		}
	}
}

func TestDiff(t *testing.T) {
	before := json.RawMessage(`{"gray_percent":5,"white_list":["uid:1","uid:2"],"targets":{"gray":"a","stable":"b"}}`)
	after := json.RawMessage(`{"gray_percent":20,"white_list":["uid:2","uid:3"],"targets":{"gray":"a","stable":"c"},"rule_name":"x"}`)
	got := Diff(before, after)
	var lines []string
	for _, d := range got {
		lines = append(lines, d.Op+" "+d.Path)
	}
	want := "changed gray_percent,added rule_name,changed targets.stable,removed white_list,added white_list"
	if strings.Join(lines, ",") != want {
		t.Errorf("Diff = %v, want %s", lines, want)
	}
	if d := Diff(nil, after); len(d) != 1 || d[0].Op != "added" {
		t.Errorf("creation diff = %+v", d)
	}
}

func FuzzDecodeRuleBody(f *testing.F) {
	f.Add([]byte(`{"type":"gray","gray_percent":10,"targets":{"gray":"h:1","stable":"h:2"},"reason":"r"}`))
	f.Add([]byte(`{"key":"k","type":"ab","experiment_id":"e","groups":[{"name":"A","weight":100,"target":"h:1"}]}`))
	f.Add([]byte(`{"rules":[{"tag":"a","operator":"gt","value":1}],"target":"h:1"}`))
	f.Add([]byte(`{"type":"gray","gray_percent":0,"targets":{"gray":"h:1","stable":"h:2"},"rollout":{"steps":[{"percent":5},{"pause":{}}],"status":{"state":"completed","step":2,"started_at":"2026-01-01T00:00:00Z","step_started_at":"2026-01-01T00:00:00Z"}}}`))
	f.Add([]byte(`{"type":"gray","gray_percent":0,"targets":{"gray":"h:1","stable":"h:2"},"rollout":{"steps":[{"analysis":"a"}],"analyses":{"a":{"interval":"1s","checks":[{"webhook":{"url":"http://h/x"}}]}},"status":7}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, _, err := decodeRuleBody(body, "k")
		if err != nil {
			for _, fe := range strict.Fields(err) {
				if fe.Message == "" {
					t.Fatalf("empty message for %q", body)
				}
			}
			return
		}
		if r.Key != "k" {
			t.Fatalf("key %q, want the URL's", r.Key)
		}
		if r.Rollout != nil && r.Rollout.Status != nil {
			t.Fatalf("a client's rollout.status survived decoding: %s", body)
		}
	})
}

func TestRoles(t *testing.T) {
	tests := []struct {
		route, role string
		want        bool
	}{
		{RoleAdmin, RoleAdmin, true}, {RoleAdmin, RoleViewer, false}, {RoleAdmin, RoleEvents, false},
		{RoleViewer, RoleAdmin, true}, {RoleViewer, RoleViewer, true}, {RoleViewer, RoleEvents, false},
		{RoleEvents, RoleAdmin, true}, {RoleEvents, RoleViewer, false}, {RoleEvents, RoleEvents, true},
		{RoleViewer, "root", false},
	}
	for _, tt := range tests {
		if got := allowed(tt.route, tt.role); got != tt.want {
			t.Errorf("allowed(route %q, token %q) = %v, want %v", tt.route, tt.role, got, tt.want)
		}
	}
}
