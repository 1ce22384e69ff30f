package rule

import (
	"strings"
	"testing"
)

// An anonymous visitor's cookie id is chosen by the client: a visitor
// sending gg_uid=10001 must not pass for the whitelisted user 10001, while
// the same id from an identity source (X-User-Id, a token) does. The
// visitor keeps its bucket, and explain says why the listed id did not hit.
func TestAnonymousIDIsNotWhitelisted(t *testing.T) {
	c := mustParse(t, `{"key":"g","type":"gray","gray_percent":0,"white_list":["uid:10001"],
		"targets":{"gray":"127.0.0.1:2","stable":"127.0.0.1:1"}}`)
	tests := []struct {
		name      string
		anonymous bool
		claimed   bool
		reason    string
	}{
		{"identified user", false, true, "whitelisted (uid:10001)"},
		{"anonymous cookie id", true, false, "uid:10001 is listed, but that is the anonymous cookie's id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := facts(req("/", "", ""), "10001")
			f.Anonymous = tt.anonymous
			var tr Trace
			if _, ok := c.Eval(f, false, nil, &tr); ok != tt.claimed || !strings.Contains(tr.Reason, tt.reason) {
				t.Errorf("traced Eval claimed = %v (%s), want %v (%s)", ok, tr.Reason, tt.claimed, tt.reason)
			}
			if _, ok := c.Eval(f, false, nil, nil); ok != tt.claimed {
				t.Errorf("live Eval claimed = %v, want %v", ok, tt.claimed)
			}
		})
	}
	// At 100% an anonymous visitor is still claimed by its bucket.
	all := mustParse(t, `{"key":"g","type":"gray","gray_percent":100,"white_list":["uid:10001"],
		"targets":{"gray":"127.0.0.1:2","stable":"127.0.0.1:1"}}`)
	f := facts(req("/", "", ""), "10001")
	f.Anonymous = true
	if _, ok := all.Eval(f, false, nil, nil); !ok {
		t.Error("an anonymous visitor at 100% is not claimed")
	}
}

// Client addresses are compared unmapped, so an IPv4-mapped entry must
// name the IPv4 clients it spells, as an IPv4-mapped address does.
func TestMappedWhitelistEntries(t *testing.T) {
	c := mustParse(t, `{"key":"g","type":"gray","gray_percent":0,
		"white_list":["ip:::ffff:198.51.100.0/120","ip:::ffff:203.0.113.9","ip:2001:db8::/32"],
		"targets":{"gray":"127.0.0.1:2","stable":"127.0.0.1:1"}}`)
	tests := []struct {
		ip      string
		claimed bool
	}{
		{"198.51.100.5", true},
		{"::ffff:198.51.100.200", true},
		{"198.51.101.5", false},
		{"203.0.113.9", true},
		{"2001:db8::7", true},
		{"2001:db9::7", false},
	}
	for _, tt := range tests {
		if _, ok := c.Eval(facts(req("/", "", tt.ip), "u"), false, nil, nil); ok != tt.claimed {
			t.Errorf("client %s: claimed = %v, want %v", tt.ip, ok, tt.claimed)
		}
	}
}
