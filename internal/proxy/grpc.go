package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// gRPC over HTTP/2 (grpc/grpc doc/PROTOCOL-HTTP2.md): what the gateway
// reads of it and how it answers in it.
const (
	hdrGRPCStatus  = "Grpc-Status"
	hdrGRPCMessage = "Grpc-Message"
	hdrGRPCTimeout = "Grpc-Timeout"
)

// gRPC status codes the gateway answers with (doc/statuscodes.md).
const (
	grpcCancelled         = 1
	grpcUnknown           = 2
	grpcDeadlineExceeded  = 4
	grpcResourceExhausted = 8
	grpcUnimplemented     = 12
	grpcInternal          = 13
	grpcUnavailable       = 14
	grpcUnauthenticated   = 16
)

// isGRPC reports a gRPC request: Content-Type application/grpc, alone or
// with a +codec suffix or parameters.
func isGRPC(ct string) bool {
	const g = "application/grpc"
	if len(ct) < len(g) || !strings.EqualFold(ct[:len(g)], g) {
		return false
	}
	return len(ct) == len(g) || ct[len(g)] == '+' || ct[len(g)] == ';'
}

// parseGRPCStatus reads a grpc-status value; -1 if it is not a code.
func parseGRPCStatus(v string) int {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 16 {
		return -1
	}
	return n
}

// parseGRPCTimeout reads grpc-timeout: at most 8 digits and a unit, H M S
// m u n. ok is false for a missing or malformed value.
func parseGRPCTimeout(v string) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	if n > int64(maxGRPCTimeout/unit) {
		// 99999999H is eleven thousand years: no deadline worth the name,
		// and more than a Duration holds.
		return maxGRPCTimeout, true
	}
	return time.Duration(n) * unit, true
}

// maxGRPCTimeout caps a grpc-timeout: a year.
const maxGRPCTimeout = 365 * 24 * time.Hour

// grpcCode is the gRPC status of an answer the gateway makes itself with
// HTTP status status: the mapping gRPC clients apply to an HTTP status
// (doc/http-grpc-status-mapping.md), so that a gRPC client reads the same
// code from the gateway's gRPC answer as it would from its HTTP status,
// except that a timeout the client's own deadline bounded is
// DEADLINE_EXCEEDED, and the body and header limits RESOURCE_EXHAUSTED.
func grpcCode(status int, deadline bool) int {
	switch {
	case status == http.StatusGatewayTimeout && deadline:
		return grpcDeadlineExceeded
	case status == http.StatusRequestEntityTooLarge, status == http.StatusRequestHeaderFieldsTooLarge:
		return grpcResourceExhausted
	case status == http.StatusBadRequest:
		return grpcInternal
	case status == http.StatusUnauthorized:
		return grpcUnauthenticated
	case status == http.StatusForbidden:
		return 7 // PERMISSION_DENIED
	case status == http.StatusNotFound, status == http.StatusMethodNotAllowed:
		return grpcUnimplemented
	case status == http.StatusTooManyRequests, status == http.StatusBadGateway,
		status == http.StatusServiceUnavailable, status == http.StatusGatewayTimeout:
		return grpcUnavailable
	case status == StatusClientClosedRequest:
		return grpcCancelled
	}
	return grpcUnknown
}

// appendGRPCMessage appends msg percent-encoded as grpc-message wants:
// every byte outside printable ASCII, and '%', as %XX.
func appendGRPCMessage(dst []byte, msg []byte) []byte {
	const hex = "0123456789ABCDEF"
	for _, c := range msg {
		if c < 0x20 || c > 0x7e || c == '%' {
			dst = append(dst, '%', hex[c>>4], hex[c&0xf])
			continue
		}
		dst = append(dst, c)
	}
	return dst
}
