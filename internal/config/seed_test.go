package config

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestRulesNotApplied: a rule of the file whose key the store holds with
// other contents, or deleted, is named; one the store holds as the file
// says it, however formatted and with the rollout status the gateway
// writes, is not.
func TestRulesNotApplied(t *testing.T) {
	c, err := Parse([]byte(`
rules:
  - {key: a, type: gray, gray_percent: 10, targets: {gray: "127.0.0.1:2", stable: "127.0.0.1:1"}}
  - {key: b, type: gray, gray_percent: 0, white_list: [], targets: {gray: "127.0.0.1:2", stable: "127.0.0.1:1"},
     rollout: {steps: [{percent: 5}, {pause: 1m}]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	const (
		a        = `{"key":"a","type":"gray","gray_percent":10,"targets":{"gray":"127.0.0.1:2","stable":"127.0.0.1:1"}}`
		aOrdered = "{\n  \"targets\": {\"stable\": \"127.0.0.1:1\", \"gray\": \"127.0.0.1:2\"},\n  \"gray_percent\": 10.0, \"type\": \"gray\", \"key\": \"a\"\n}"
		aEdited  = `{"key":"a","type":"gray","gray_percent":50,"targets":{"gray":"127.0.0.1:2","stable":"127.0.0.1:1"}}`
		b        = `{"key":"b","type":"gray","gray_percent":0,"targets":{"gray":"127.0.0.1:2","stable":"127.0.0.1:1"},"rollout":{"steps":[{"percent":5},{"pause":"1m"}]}}`
		bRunning = `{"key":"b","type":"gray","gray_percent":0,"targets":{"gray":"127.0.0.1:2","stable":"127.0.0.1:1"},"rollout":{"steps":[{"percent":5},{"pause":"1m"}],"status":{"state":"running","step":0}}}`
		// The rollout's first step has moved gray_percent.
		bMoved = `{"key":"b","type":"gray","gray_percent":5,"targets":{"gray":"127.0.0.1:2","stable":"127.0.0.1:1"},"rollout":{"steps":[{"percent":5},{"pause":"1m"}],"status":{"state":"progressing","step":1}}}`
		// gray_percent changed, but no rollout has run: an edit.
		bEdited = `{"key":"b","type":"gray","gray_percent":5,"targets":{"gray":"127.0.0.1:2","stable":"127.0.0.1:1"},"rollout":{"steps":[{"percent":5},{"pause":"1m"}]}}`
		// A rollout has run, and its steps were edited.
		bOtherSteps = `{"key":"b","type":"gray","gray_percent":5,"targets":{"gray":"127.0.0.1:2","stable":"127.0.0.1:1"},"rollout":{"steps":[{"percent":5},{"pause":"2m"}],"status":{"state":"progressing","step":1}}}`
		// A rollout has run, and the targets were edited.
		bOtherTargets = `{"key":"b","type":"gray","gray_percent":5,"targets":{"gray":"127.0.0.1:3","stable":"127.0.0.1:1"},"rollout":{"steps":[{"percent":5},{"pause":"1m"}],"status":{"state":"progressing","step":1}}}`
		// A rollout status on a rule whose file has no rollout.
		aRolled = `{"key":"a","type":"gray","gray_percent":5,"targets":{"gray":"127.0.0.1:2","stable":"127.0.0.1:1"},"rollout":{"steps":[{"percent":5}],"status":{"state":"completed","step":1}}}`
	)
	tests := []struct {
		name string
		held map[string]string
		want []NotApplied
	}{
		{"as the file says", map[string]string{"a": a, "b": b}, nil},
		{"formatted and ordered otherwise", map[string]string{"a": aOrdered, "b": b}, nil},
		{"a rollout status", map[string]string{"a": a, "b": bRunning}, nil},
		{"gray_percent moved by the rollout", map[string]string{"a": a, "b": bMoved}, nil},
		{"gray_percent edited, no rollout run", map[string]string{"a": a, "b": bEdited}, []NotApplied{{Key: "b"}}},
		{"a rollout has run, steps edited", map[string]string{"a": a, "b": bOtherSteps}, []NotApplied{{Key: "b"}}},
		{"a rollout has run, targets edited", map[string]string{"a": a, "b": bOtherTargets}, []NotApplied{{Key: "b"}}},
		{"a rollout added through the API", map[string]string{"a": aRolled, "b": b}, []NotApplied{{Key: "a"}}},
		{"edited through the API", map[string]string{"a": aEdited, "b": b}, []NotApplied{{Key: "a"}}},
		{"deleted", map[string]string{"b": b}, []NotApplied{{Key: "a", Deleted: true}}},
		{"both, in file order", map[string]string{"a": aEdited}, []NotApplied{{Key: "a"}, {Key: "b", Deleted: true}}},
		{"stored JSON that is not a rule", map[string]string{"a": `{"key":"a","bogus":1}`, "b": b}, []NotApplied{{Key: "a"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			held := map[string]json.RawMessage{}
			for k, v := range tt.held {
				held[k] = json.RawMessage(v)
			}
			if got := c.RulesNotApplied(held); !slices.Equal(got, tt.want) {
				t.Errorf("RulesNotApplied = %+v, want %+v", got, tt.want)
			}
		})
	}
}
