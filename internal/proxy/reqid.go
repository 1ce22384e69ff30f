package proxy

import (
	"crypto/rand"
	"encoding/hex"
	"sync/atomic"
)

// requestIDs issues X-Request-Id values: 16 hex digits drawn at random once
// per process, then 16 hex digits of a counter, so ids are unique across
// the gateways of a fleet and cost one atomic add each.
type requestIDs struct {
	prefix [16]byte
	n      atomic.Uint64
}

func (r *requestIDs) init() {
	var b [8]byte
	_, _ = rand.Read(b[:])
	hex.Encode(r.prefix[:], b[:])
}

// next appends a new id to dst.
func (r *requestIDs) next(dst []byte) []byte {
	const digits = "0123456789abcdef"
	n := r.n.Add(1)
	dst = append(dst, r.prefix[:]...)
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, digits[(n>>uint(shift))&0xf])
	}
	return dst
}

// maxRequestIDBytes bounds an X-Request-Id kept from a trusted peer.
const maxRequestIDBytes = 128

// setRequestID gives the request its X-Request-Id: in, the one a trusted
// peer sent, if it is a plausible id (1 to 128 visible ASCII characters),
// else a new one. in is nil for a request that could not be parsed.
func (f *flow) setRequestID(in []byte, trusted bool) {
	if trusted && validRequestID(in) {
		f.reqID = append(f.reqID[:0], in...)
		return
	}
	f.reqID = f.p.ids.next(f.reqID[:0])
}

func validRequestID(v []byte) bool {
	if len(v) == 0 || len(v) > maxRequestIDBytes {
		return false
	}
	return visibleASCII(v)
}

// visibleASCII reports whether v holds only visible ASCII (VCHAR): what a
// request target and a kept request id may hold.
func visibleASCII[T string | []byte](v T) bool {
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] >= 0x7f {
			return false
		}
	}
	return true
}
