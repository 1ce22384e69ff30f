package config

import (
	"strings"
	"testing"
)

// TestNotifications: the notifications list decodes strictly, and every
// problem is named by its path; no message quotes a URL.
func TestNotifications(t *testing.T) {
	t.Setenv("HOOK_SECRET", "s3cret")
	t.Setenv("EMPTY_SECRET", "")
	tests := []struct {
		name, yaml string
		want       []string // nil: valid
	}{
		{"valid", `
name: gw-eu-1
notifications:
  - {name: ops, url: "https://hooks.slack.com/services/T0/B0/credential", events: [breaker_open, breaker_close, rollback, resume]}
  - {name: audit, url: "http://127.0.0.1:9000/graygate", secret_env: HOOK_SECRET}
  - {name: rollouts, url: "http://10.0.0.9/hook", events: [rollout_step, rollout_paused, rollout_aborted, rollout_completed, srm]}
`, nil},
		{"misspelled event", `notifications: [{name: a, url: "http://h/"}, {name: b, url: "http://h/", events: [brekaer_open]}]`,
			[]string{`notifications[1].events[0]: unknown event "brekaer_open" (known: breaker_open, breaker_close, rollback, resume, rollout_step, rollout_paused, rollout_aborted, rollout_completed, srm)`}},
		{"duplicate event", `notifications: [{name: a, url: "http://h/", events: [srm, rollback, srm]}]`,
			[]string{`notifications[0].events[2]: duplicates events[0] "srm"`}},
		{"name required", `notifications: [{url: "http://h/"}]`, []string{"notifications[0].name: is required"}},
		{"name unique", `notifications: [{name: ops, url: "http://h/"}, {name: x, url: "http://h/"}, {name: ops, url: "http://h/"}]`,
			[]string{`notifications[2].name: duplicates notifications[0].name "ops"`}},
		{"url required", `notifications: [{name: a}]`, []string{"notifications[0].url: is required"}},
		{"url scheme", `notifications: [{name: a, url: "ftp://h/credential"}]`, []string{`notifications[0].url: must be an http or https URL, got scheme "ftp"`}},
		{"url without scheme", `notifications: [{name: a, url: "hooks.slack.com/credential"}]`, []string{"notifications[0].url: must be an http or https URL, got no scheme"}},
		{"url without host", `notifications: [{name: a, url: "https:///credential"}]`, []string{"notifications[0].url: has no host"}},
		{"url with only a port", `notifications: [{name: a, url: "http://:1234/credential"}]`, []string{"notifications[0].url: has no host name, only a port"}},
		{"url with a user and no host", `notifications: [{name: a, url: "http://user:credential@/"}]`, []string{"notifications[0].url: has no host"}},
		{"url unparsable", `notifications: [{name: a, url: "http://h/%zzcredential"}]`, []string{"notifications[0].url: is not a valid URL"}},
		{"secret unset", `notifications: [{name: a, url: "http://h/", secret_env: NO_SUCH_SECRET_VAR}]`,
			[]string{"notifications[0].secret_env: environment variable NO_SUCH_SECRET_VAR is empty or unset"}},
		{"secret empty", `notifications: [{name: a, url: "http://h/", secret_env: EMPTY_SECRET}]`,
			[]string{"notifications[0].secret_env: environment variable EMPTY_SECRET is empty or unset"}},
		{"unknown key", `notifications: [{name: a, url: "http://h/", secret: x}]`, []string{"notifications[0].secret: unknown field"}},
		{"events not a list", `notifications: [{name: a, url: "http://h/", events: srm}]`, []string{"notifications[0].events: expected an array"}},
		{"not a list", `notifications: {name: a}`, []string{"notifications: expected an array"}},
		{"every problem at once", `notifications: [{events: [nope]}, {name: b, url: "gopher://h", secret_env: NO_SUCH_SECRET_VAR}]`,
			[]string{"notifications[0].name: is required", "notifications[0].url: is required", `notifications[0].events[0]: unknown event "nope"`,
				`notifications[1].url: must be an http or https URL, got scheme "gopher"`, "notifications[1].secret_env:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Parse = %v", err)
				}
				if len(c.Notifications) != 3 || c.Name != "gw-eu-1" || c.Notifications[1].SecretEnv != "HOOK_SECRET" || len(c.Notifications[1].Events) != 0 ||
					len(c.Notifications[0].Events) != 4 {
					t.Errorf("decoded %+v", c.Notifications)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse(%s) succeeded", tt.yaml)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse = %v\nwant it to contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "credential") {
				t.Errorf("the error quotes a URL: %v", err)
			}
		})
	}
}
