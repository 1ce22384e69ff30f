package proxy

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// piece is where one write of a message ends (an offset into it) and how
// long the writer waits after it.
type piece struct {
	end int
	gap time.Duration
}

// cutAtRandom cuts b at one to five places: one chosen among the places
// where a split is most likely to be mishandled (inside a CRLF, right
// after a line's end, right after a colon), the others anywhere. Each
// piece is followed by a gap of 0, 1 or 2 ms. A b of one byte or none is
// not cut.
func cutAtRandom(r *rand.Rand, b []byte) []piece {
	if len(b) < 2 {
		return nil
	}
	var tricky []int
	for i := 1; i < len(b); i++ {
		switch b[i-1] {
		case '\r', '\n', ':':
			tricky = append(tricky, i)
		}
	}
	var ends []int
	if len(tricky) > 0 {
		ends = append(ends, tricky[r.IntN(len(tricky))])
	}
	for n := r.IntN(5); n > 0; n-- {
		ends = append(ends, 1+r.IntN(len(b)-1))
	}
	if len(ends) == 0 {
		ends = append(ends, 1+r.IntN(len(b)-1))
	}
	slices.Sort(ends)
	ends = slices.Compact(append(ends, len(b)))
	pieces := make([]piece, len(ends))
	for i, e := range ends {
		pieces[i] = piece{end: e, gap: time.Duration(r.IntN(3)) * time.Millisecond}
	}
	return pieces
}

// writePieces writes b to conn piece by piece, each a write of its own
// (loopback sockets send without delay, so each is a segment of its own)
// followed by its gap; with no pieces, in one write. It stops at the
// first failed write: the gateway may have refused and closed.
func writePieces(conn net.Conn, b []byte, pieces []piece) {
	if pieces == nil {
		_, _ = conn.Write(b)
		return
	}
	at := 0
	for _, p := range pieces {
		if _, err := conn.Write(b[at:p.end]); err != nil {
			return
		}
		at = p.end
		if p.gap > 0 {
			time.Sleep(p.gap)
		}
	}
}

// describePieces says how b was cut, for a failure's message: each piece
// quoted, with the gap after it; "" for one write.
func describePieces(b []byte, pieces []piece) string {
	if pieces == nil {
		return ""
	}
	var sb strings.Builder
	sb.WriteString("\nin pieces:")
	at := 0
	for _, p := range pieces {
		fmt.Fprintf(&sb, " %q +%v", b[at:p.end], p.gap)
		at = p.end
	}
	return sb.String()
}

func TestCutAtRandom(t *testing.T) {
	b := []byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	for seed := range uint64(200) {
		pieces := cutAtRandom(rand.New(rand.NewPCG(seed, 7)), b)
		if len(pieces) < 2 || len(pieces) > 7 {
			t.Fatalf("seed %d: %d pieces, want 2 to 7", seed, len(pieces))
		}
		var joined []byte
		at, tricky := 0, false
		for _, p := range pieces {
			if p.end <= at || p.gap < 0 || p.gap > 2*time.Millisecond {
				t.Fatalf("seed %d: piece %+v after %d", seed, p, at)
			}
			if p.end < len(b) && bytes.ContainsAny(b[p.end-1:p.end], "\r\n:") {
				tricky = true
			}
			joined = append(joined, b[at:p.end]...)
			at = p.end
		}
		if !bytes.Equal(joined, b) || !tricky {
			t.Fatalf("seed %d: pieces %+v join to %q (a cut after CR, LF or a colon: %v)", seed, pieces, joined, tricky)
		}
	}
	if p := cutAtRandom(rand.New(rand.NewPCG(1, 7)), []byte("x")); p != nil {
		t.Errorf("one byte cut into %+v", p)
	}
}
