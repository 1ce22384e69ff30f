package proxy

import (
	"net/http"
	"testing"
	"time"
)

// TestUnendedBadChunkLine: a chunked upload whose chunk-size line, or
// trailer line, is already malformed ("x=y", ",") before its end has
// arrived gets 400 through the real listener, and nothing of the request
// reaches the upstream: whether the client then waits or half-closes,
// and with "Expect: 100-continue", where the head would otherwise go
// upstream first to wait for its 100. Before, the Guard judged such a
// line only at its LF: a client that half-closed got no answer (logged
// 499) or had its body forwarded and cut, one that waited got nothing
// until its body read timeout, and with Expect the head was forwarded
// and an upstream's early answer relayed as a 200.
func TestUnendedBadChunkLine(t *testing.T) {
	head := "POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
	tests := []struct {
		name      string
		in        string
		halfClose bool
	}{
		{"half-closed", head + "\r\nx=y", true},
		{"waiting", head + "\r\nx=y", false},
		{"expect, half-closed", head + "Expect: 100-continue\r\n\r\nx=y", true},
		{"expect, waiting", head + "Expect: 100-continue\r\n\r\nx=y", false},
		{"second chunk", head + "\r\n1\r\nx\r\n-1", true},
		{"trailer line", head + "\r\n1\r\na\r\n0\r\n,", true},
		{"trailer line, waiting", head + "\r\n1\r\na\r\n0\r\nX Y", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A body read timeout longer than the exchange's deadline: the
			// answer must not wait for it.
			status, rec := answerThroughGateway(t, Options{ReadTimeout: time.Minute}, tt.in, tt.halfClose, http.MethodPost)
			if status != http.StatusBadRequest {
				t.Errorf("status %d, want 400", status)
			}
			if rec.received != 0 {
				t.Errorf("the upstream received %d bytes (%d requests); want none", rec.received, len(rec.reqs))
			}
		})
	}
}
