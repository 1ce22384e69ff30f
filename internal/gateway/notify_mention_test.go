package gateway

import (
	"strings"
	"testing"
	"unicode"
)

// mentionWords returns the words of a chat text that Mattermost would
// read as mentions: it splits a message at every character that is not
// a letter, a digit or one of : . - _ @ (its standard mention parser),
// and a word that starts with "@" and has more after it mentions a user,
// a group, or with @channel, @all and @here everyone.
func mentionWords(text string) []string {
	var out []string
	for _, w := range strings.FieldsFunc(text, func(c rune) bool {
		return !(c == ':' || c == '.' || c == '-' || c == '_' || c == '@' || unicode.IsLetter(c) || unicode.IsNumber(c))
	}) {
		if strings.HasPrefix(w, "@") && len(strings.TrimLeft(w, "@")) > 0 {
			out = append(out, w)
		}
	}
	return out
}

// TestNotificationReasonPingsNoOne: an operator's reason that says
// "@channel" (or names a user) reaches a chat webhook's text without a
// word Mattermost takes as a mention, and without a Slack <!channel>,
// while the body's reason field keeps the reason as it was given.
// Through the real admin listener and a real receiver.
func TestNotificationReasonPingsNoOne(t *testing.T) {
	rcv := newHook(t, "")
	e := start(t, baseConfig+`
name: gw-e2e
notifications:
  - {name: chat, url: "`+rcv.srv.URL+`/hooks/chat"}
`, "")
	const reason = "@channel @here @all: gray 5xx, ask @alice.smith <!channel> & co"
	if code, out := e.api("POST", "/api/v1/rollback", map[string]any{"reason": reason}); code != 200 {
		t.Fatalf("rollback = %d %v", code, out)
	}
	b := rcv.waitEvents(1, "the rollback event")[0]
	text, _ := b["text"].(string)
	if m := mentionWords(text); len(m) != 0 {
		t.Errorf("the chat text %q has mentions %q", text, m)
	}
	if strings.Contains(text, "<!") {
		t.Errorf("the chat text %q has a Slack special mention", text)
	}
	// Invisible joiners aside, the text reads as the reason did, escaped
	// as Slack asks.
	shown := strings.ReplaceAll(text, "\u2060", "")
	if want := "(reason: @channel @here @all: gray 5xx, ask @alice.smith &lt;!channel&gt; &amp; co)"; !strings.Contains(shown, want) {
		t.Errorf("the chat text %q does not read %q", shown, want)
	}
	if b["reason"] != reason {
		t.Errorf("the body's reason is %q, want it as given: %q", b["reason"], reason)
	}
	// The test's mention reader finds what it should.
	if m := mentionWords("[gw] ok (reason: @channel, ask @alice.smith)"); len(m) != 2 {
		t.Errorf("mentionWords found %q, want @channel and @alice.smith", m)
	}
}
