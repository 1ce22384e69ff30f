package main

import (
	"fmt"
	"io"
)

// safeWriter escapes the control characters in what a client command
// prints. Rule reasons, rollout messages and API errors are other people's
// text: a reason holding ESC ] 0 ; … BEL would retitle the operator's
// terminal, and one holding ESC [ 2 J or a CR would clear or overwrite
// what history printed before it. Every C0 control but LF and TAB, DEL,
// and the C1 controls (U+0080 to U+009F, which some terminals obey too)
// are written as \u00XX: the text stays readable, and JSON output stays
// valid JSON meaning the same (encoding/json already escapes C0 controls
// in strings, but not C1 ones).
type safeWriter struct{ w io.Writer }

func (s safeWriter) Write(p []byte) (int, error) {
	var out []byte
	start := 0
	for i := 0; i < len(p); i++ {
		b, n := p[i], 1
		switch {
		case b < 0x20 && b != '\n' && b != '\t', b == 0x7f:
		case b == 0xc2 && i+1 < len(p) && p[i+1] >= 0x80 && p[i+1] <= 0x9f:
			b, n = p[i+1], 2
		default:
			continue
		}
		out = append(out, p[start:i]...)
		out = fmt.Appendf(out, `\u%04x`, b)
		i += n - 1
		start = i + 1
	}
	if out == nil {
		out = p
	} else {
		out = append(out, p[start:]...)
	}
	if _, err := s.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// terminal returns the writer under w's escaping (w itself if it has
// none), for a command's own terminal control: rollout --watch redraws
// its frame with ANSI sequences. What it writes there that came from the
// API must pass through a safeWriter first.
func terminal(w io.Writer) io.Writer {
	if s, ok := w.(safeWriter); ok {
		return s.w
	}
	return w
}
