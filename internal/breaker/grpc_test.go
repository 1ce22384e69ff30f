package breaker

import (
	"encoding/json"
	"testing"
)

func TestGRPCErrorCodes(t *testing.T) {
	tests := []struct {
		name   string
		json   string
		failed []int
		ok     []int
		err    bool
	}{
		{"default", `{}`, []int{14, 13, 4, 8}, []int{0, 1, 2, 3, 5, 16, -1}, false},
		{"names and numbers", `{"grpc_error_codes": ["unavailable", 2]}`, []int{14, 2}, []int{13, 4, 8, 0}, false},
		{"none", `{"grpc_error_codes": []}`, nil, []int{14, 13, 4, 8}, false},
		{"unknown name", `{"grpc_error_codes": ["BROKEN"]}`, nil, nil, true},
		{"out of range", `{"grpc_error_codes": [17]}`, nil, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Config
			err := json.Unmarshal([]byte(tt.json), &c)
			if tt.err {
				if err == nil {
					t.Fatalf("Unmarshal(%s) succeeded", tt.json)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := New(c, Options{Name: "t"})
			if err != nil {
				t.Fatal(err)
			}
			for _, code := range tt.failed {
				if !b.IsErrorGRPC(code) {
					t.Errorf("IsErrorGRPC(%d) = false, want true", code)
				}
			}
			for _, code := range tt.ok {
				if b.IsErrorGRPC(code) {
					t.Errorf("IsErrorGRPC(%d) = true, want false", code)
				}
			}
		})
	}
	out, err := json.Marshal(Defaults().GRPCErrorCodes)
	if err != nil || string(out) != `["UNAVAILABLE","INTERNAL","DEADLINE_EXCEEDED","RESOURCE_EXHAUSTED"]` {
		t.Errorf("default codes marshal to %s, %v", out, err)
	}
}
