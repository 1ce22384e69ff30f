package rule

import (
	"strings"
	"testing"

	"github.com/graygate/graygate/internal/mirror"
	"github.com/graygate/graygate/internal/strict"
)

const mirrorBase = `{"key":"m","type":"gray","gray_percent":10,"targets":{"gray":"127.0.0.1:2","stable":"user-center"},"mirror":%s}`

func withMirror(m string) string { return strings.Replace(mirrorBase, "%s", m, 1) }

func TestMirrorCompiles(t *testing.T) {
	c := mustParse(t, withMirror(`{"target":"127.0.0.1:3","percent":12.5,"methods":["GET","POST"],"max_body":"1MiB",
		"host_suffix":"-dark","diff":{"secondary":"user-center","ignore":["headers.Date","body.request_id","body.items[*].at","status"]}}`))
	m := c.Mirror
	if m == nil {
		t.Fatal("no compiled mirror")
	}
	if m.Target.Instances[0].Addr != "127.0.0.1:3" || m.Secondary.Name != "user-center" || m.TargetName != "127.0.0.1:3" {
		t.Errorf("targets = %+v / %+v", m.Target, m.Secondary)
	}
	if m.Percent != 12.5 || m.MaxBody != 1<<20 || m.HostSuffix != "-dark" || !m.Diff {
		t.Errorf("spec = %+v", m)
	}
	if got := strings.Join(m.Ignore.Paths(), " "); got != "headers.date body.request_id body.items[*].at status" {
		t.Errorf("ignore = %q", got)
	}
	if strings.Join(m.Methods, ",") != "GET,POST" {
		t.Errorf("methods = %v", m.Methods)
	}

	d := mustParse(t, withMirror(`{"percent":5}`)).Mirror
	if d.TargetName != "127.0.0.1:2" || d.MaxBody != mirror.DefaultMaxBody || d.HostSuffix != "-shadow" || d.Diff || d.Secondary != nil {
		t.Errorf("defaults = %+v", d)
	}
	if strings.Join(d.Methods, ",") != "GET,HEAD" {
		t.Errorf("default methods = %v", d.Methods)
	}
	if n := mustParse(t, withMirror(`{"percent":5,"max_body":4096,"host_suffix":""}`)).Mirror; n.MaxBody != 4096 || n.HostSuffix != "" {
		t.Errorf("max_body as a number, empty suffix: %+v", n)
	}
}

func TestMirrorValidation(t *testing.T) {
	tests := []struct {
		name string
		js   string
		want []string // "path: substring"
	}{
		{"percent missing", withMirror(`{}`), []string{"mirror.percent: is required"}},
		{"percent range", withMirror(`{"percent":120}`), []string{"mirror.percent: must be 0..100, got 120"}},
		{"percent decimals", withMirror(`{"percent":1.234}`), []string{"mirror.percent: allows at most two decimals, got 1.234"}},
		{"methods", withMirror(`{"percent":1,"methods":["GET","G T","GET","CONNECT"]}`),
			[]string{"mirror.methods[1]: must be a method token", "mirror.methods[2]: duplicates methods[0]", "mirror.methods[3]: CONNECT cannot be mirrored"}},
		{"methods in another case", withMirror(`{"percent":1,"methods":["post","POST","connect"]}`),
			[]string{`mirror.methods[1]: duplicates methods[0] "post"`, "mirror.methods[2]: CONNECT cannot be mirrored"}},
		{"methods empty", withMirror(`{"percent":1,"methods":[]}`), []string{"mirror.methods: must name at least one method"}},
		{"max_body syntax", withMirror(`{"percent":1,"max_body":"lots"}`), []string{`mirror.max_body: expected a size such as "64KiB" or "1MiB", got "lots"`}},
		{"max_body too large", withMirror(`{"percent":1,"max_body":"1GiB"}`), []string{"mirror.max_body: must be 0..16 MiB, got 1073741824 bytes"}},
		{"host_suffix", withMirror(`{"percent":1,"host_suffix":"a b"}`), []string{`mirror.host_suffix: must be characters allowed in a host name, got "a b"`}},
		{"ignore", withMirror(`{"percent":1,"diff":{"ignore":["headers.date","cookies.x","body.items[x]","status.code","headers.a b"]}}`),
			[]string{`mirror.diff.ignore[1]: must start with "status", "headers." or "body"`, "mirror.diff.ignore[2]: array index must be",
				`mirror.diff.ignore[3]: "status" has no parts`, "mirror.diff.ignore[4]: must be headers.<header name>"}},
		{"targets", withMirror(`{"percent":1,"target":"nowhere","diff":{"secondary":"::"}}`),
			[]string{"mirror.target: ", "mirror.diff.secondary: "}},
		{"unknown field", withMirror(`{"percent":1,"ratio":2}`), []string{"mirror.ratio: unknown field"}},
		{"ab rule", `{"key":"a","type":"ab","experiment_id":"e","groups":[{"name":"A","weight":100,"target":"h:1"}],"mirror":{"percent":1}}`,
			[]string{"mirror: is only for gray rules"}},
		{"tag rule", `{"key":"t","rules":[{"tag":"vip","operator":"eq","value":true}],"target":"h:1","mirror":{"percent":1}}`,
			[]string{"mirror: is only for gray rules"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.js), testEnv())
			if err == nil {
				t.Fatalf("Parse accepted %s", tt.js)
			}
			fields := strict.Fields(err)
			for _, w := range tt.want {
				path, msg, _ := strings.Cut(w, ": ")
				found := false
				for _, f := range fields {
					if f.Path == path && strings.Contains(f.Message, msg) {
						found = true
					}
				}
				if !found {
					t.Errorf("want %q in %v", w, err)
				}
			}
		})
	}
}

// TestMirrorInScope checks what the router reads: a gray rule that has a
// request in scope and does not claim it says so.
func TestMirrorInScope(t *testing.T) {
	c := mustParse(t, `{"key":"g","type":"gray","gray_percent":0,"conditions":{"path_prefix":["/api/"]},"targets":{"gray":"h:1","stable":"h:2"}}`)
	tests := []struct {
		name    string
		path    string
		inScope bool
	}{
		{"in scope, 0% gray", "/api/x", true},
		{"out of scope", "/web/x", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, ok := c.Eval(facts(req(tt.path, "", ""), "u1"), false, nil, nil)
			if ok || out.InScope != tt.inScope {
				t.Errorf("Eval(%s) = %+v, %v; want InScope %v, not claimed", tt.path, out, ok, tt.inScope)
			}
		})
	}
}
