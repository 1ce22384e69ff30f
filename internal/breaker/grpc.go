package breaker

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// GRPCCode is a gRPC status code (grpc/grpc doc/statuscodes.md). In JSON
// it is the code's name, "UNAVAILABLE", or its number, 14.
type GRPCCode uint8

// grpcNames are the names of the gRPC status codes 0 to 16, in order.
var grpcNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
	"UNAUTHENTICATED",
}

// The codes a breaker counts as failures by default: the server is down
// or overloaded (UNAVAILABLE, RESOURCE_EXHAUSTED), broke (INTERNAL), or
// too slow (DEADLINE_EXCEEDED). The others are the caller's or the
// application's answers.
var defaultGRPCCodes = []GRPCCode{14, 13, 4, 8}

// String returns the code's name.
func (c GRPCCode) String() string {
	if int(c) < len(grpcNames) {
		return grpcNames[c]
	}
	return strconv.Itoa(int(c))
}

// MarshalJSON writes the name.
func (c GRPCCode) MarshalJSON() ([]byte, error) { return json.Marshal(c.String()) }

// UnmarshalJSON accepts "UNAVAILABLE" (any case) or 14.
func (c *GRPCCode) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // leaves the zero value, as encoding/json does for null
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err == nil {
		v, err := strconv.Atoi(string(n))
		if err != nil || v < 0 || v >= len(grpcNames) {
			return fmt.Errorf("expected a gRPC status code 0..%d, got %s", len(grpcNames)-1, n)
		}
		*c = GRPCCode(v)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New(`expected a gRPC status code such as "UNAVAILABLE" or 14`)
	}
	for i, name := range grpcNames {
		if strings.EqualFold(s, name) {
			*c = GRPCCode(i)
			return nil
		}
	}
	return fmt.Errorf("unknown gRPC status code %q (want one of %s)", s, strings.Join(grpcNames[:], ", "))
}

// grpcSet is a set of gRPC codes as a bit mask.
type grpcSet uint32

func newGRPCSet(codes []GRPCCode) grpcSet {
	var s grpcSet
	for _, c := range codes {
		if int(c) < len(grpcNames) {
			s |= 1 << c
		}
	}
	return s
}

func (s grpcSet) contains(code int) bool { return code >= 0 && code < 32 && s&(1<<uint(code)) != 0 }
