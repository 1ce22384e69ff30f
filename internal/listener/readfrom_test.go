package listener

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// parts is a body stream: its parts one per Read, then err (io.EOF for
// an end).
type parts struct {
	p   []string
	err error
}

func (r *parts) Read(b []byte) (int, error) {
	if len(r.p) == 0 {
		return 0, r.err
	}
	n := copy(b, r.p[0])
	if r.p[0] = r.p[0][n:]; r.p[0] == "" {
		r.p = r.p[1:]
	}
	return n, nil
}

// TestReadFromLeavesNothingBuffered: a bufio.Writer over a Conn hands a
// copy to Conn.ReadFrom when its buffer is empty, as fasthttp's response
// writer does with a body of known length, and when it returns, with the
// stream's failure or without, everything read has been written to the
// peer; nothing is left in the writer's buffer. Through that buffer, parts
// under its size waited there, and were lost when the stream failed. (That
// each part goes out before the next read is TestLongBodyRelayedAsItArrives,
// in the proxy.)
func TestReadFromLeavesNothingBuffered(t *testing.T) {
	broke := errors.New("upstream broke off")
	for _, tt := range []struct {
		name  string
		parts []string
		end   error
		want  error
	}{
		{"an end", []string{"abc", "defg"}, io.EOF, nil},
		{"a failure after two parts", []string{"abc", "defg"}, broke, broke},
		{"a part over the copy buffer", []string{strings.Repeat("x", copyBufSize+10)}, io.EOF, nil},
		{"nothing, then a failure", nil, broke, broke},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, client := connPair(t, &Config{MaxHeaderBytes: 8 << 10, WriteTimeout: 10 * time.Second})
			r := &parts{p: append([]string(nil), tt.parts...), err: tt.end}
			seen := make(chan string, len(tt.parts)+1)
			go func() {
				// The peer reads what arrives, part by part, while the
				// stream still holds the rest.
				defer close(seen)
				buf := make([]byte, 64<<10)
				var all strings.Builder
				for {
					n, err := client.Read(buf)
					all.Write(buf[:n])
					if err != nil {
						seen <- all.String()
						return
					}
				}
			}()
			bw := bufio.NewWriterSize(c, 4096)
			n, err := bw.ReadFrom(r)
			want := strings.Join(tt.parts, "")
			if !errors.Is(err, tt.want) || n != int64(len(want)) {
				t.Fatalf("ReadFrom = %d, %v; want %d, %v", n, err, len(want), tt.want)
			}
			if bw.Buffered() != 0 {
				t.Fatalf("%d bytes left in the writer's buffer", bw.Buffered())
			}
			_ = c.Close()
			if got := <-seen; got != want {
				t.Fatalf("the peer got %d bytes, want %d", len(got), len(want))
			}
		})
	}
}
