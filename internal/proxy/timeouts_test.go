package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/upstream"
)

// slowBody sends a request with a body of head bytes at once followed by 6
// bytes trickling in over about total.
func slowBody(t *testing.T, addr string, head int, total time.Duration) (*http.Response, string) {
	t.Helper()
	c := dialBounded(t, addr, 10*time.Second)
	defer c.Close()
	const parts = 6
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", head+parts, strings.Repeat("h", head))
	for range parts {
		time.Sleep(total / parts)
		if _, err := c.Write([]byte("x")); err != nil {
			break // the gateway may have answered already
		}
	}
	resp, err := http.ReadResponse(newReader(c), &http.Request{Method: "POST"})
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestReadTimeouts(t *testing.T) {
	backend, _ := echoBackend(t, "stable")
	target := poolOf("stable", addrOf(backend))

	t.Run("header timeout does not cut a slow body", func(t *testing.T) {
		_, addr := startProxy(t, Options{ReadHeaderTimeout: 150 * time.Millisecond}, staticDecider{Group: "stable", Target: target})
		resp, body := slowBody(t, addr, 0, 600*time.Millisecond)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"body":"xxxxxx"`) {
			t.Errorf("status %d body %q, want 200 with the whole body", resp.StatusCode, body)
		}
	})
	// fasthttp reads up to 8 KiB of a body before calling the handler; the
	// rest is streamed by the handler. ReadTimeout must bound both.
	for _, head := range []int{0, 16 << 10} {
		t.Run(fmt.Sprintf("ReadTimeout bounds the body after %d bytes", head), func(t *testing.T) {
			rec := newDoneRecorder()
			_, addr := startProxy(t, Options{ReadTimeout: 150 * time.Millisecond, OnDone: rec.onDone},
				staticDecider{Group: "stable", Target: target})
			// Bytes 300 ms apart, twice the timeout: at 150 ms apart
			// (900 ms for six), a byte that came as the timer fired
			// late on a loaded machine sometimes beat it, and the
			// request went through.
			resp, body := slowBody(t, addr, head, 1800*time.Millisecond)
			if resp.StatusCode != http.StatusRequestTimeout || errBody(t, resp, body) != "graygate: request timeout\n" {
				t.Errorf("got %d %q, want 408", resp.StatusCode, body)
			}
			if d := rec.next(t, 2*time.Second); d.status != http.StatusRequestTimeout {
				t.Errorf("OnDone status %d, want 408", d.status)
			}
		})
	}
	t.Run("slow header gets 408", func(t *testing.T) {
		rec := newDoneRecorder()
		_, addr := startProxy(t, Options{ReadHeaderTimeout: 150 * time.Millisecond, OnDone: rec.onDone},
			staticDecider{Group: "stable", Target: target})
		c := dialBounded(t, addr, 5*time.Second)
		defer c.Close()
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: a\r\n") // and never finish
		resp, err := http.ReadResponse(newReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("status %d, want 408", resp.StatusCode)
		}
		if d := rec.next(t, 2*time.Second); d.status != http.StatusRequestTimeout {
			t.Errorf("OnDone status %d, want 408", d.status)
		}
	})
	// The listener arms client read deadlines lazily (listener.Conn): on a
	// keep-alive connection the head's deadline must still replace the
	// longer idle one, and the idle one the head's.
	t.Run("keep-alive: the head and idle deadlines replace each other", func(t *testing.T) {
		const header, idle = 150 * time.Millisecond, 10 * time.Second
		_, addr := startProxy(t, Options{ReadHeaderTimeout: header, IdleTimeout: idle},
			staticDecider{Group: "stable", Target: target})
		c := dialBounded(t, addr, 10*time.Second)
		defer c.Close()
		br := newReader(c)
		for i := range 3 {
			// A new connection's first byte is due within the head's
			// timeout (fasthttp's ReadTimeout); after that, the keep-alive
			// waits are longer than it: they are bounded by the idle
			// timeout, not by the head deadline armed before.
			if i > 0 {
				time.Sleep(3 * header)
			}
			fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("request %d after %v idle: %v", i+1, 3*header, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("request %d: status %d", i+1, resp.StatusCode)
			}
		}
		start := time.Now()
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: a\r\n") // and never finish
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); resp.StatusCode != http.StatusRequestTimeout || took > idle/2 {
			t.Errorf("slow head on a keep-alive connection: status %d after %v, want 408 after about %v", resp.StatusCode, took, header)
		}
	})
}

// TestMaxConnsPerHost: with every connection to an instance busy, a request
// waits DialTimeout for one and then gets 503.
func TestMaxConnsPerHost(t *testing.T) {
	stuck, arrived, _ := stuckBackend(t)
	_, addr := startProxy(t, Options{MaxConnsPerHost: 1, DialTimeout: 100 * time.Millisecond},
		staticDecider{Group: "stable", Target: poolOf("stable", stuck)})
	first, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer resetClose(t, first)
	fmt.Fprint(first, "GET /hold HTTP/1.1\r\nHost: a\r\n\r\n")
	select {
	case <-arrived: // the first request now holds the only connection
	case <-time.After(5 * time.Second):
		t.Fatal("the first request never reached the backend")
	}
	start := time.Now()
	resp, body := rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	want := "graygate: upstream \"stable\" has no free connection\n"
	if resp.StatusCode != http.StatusServiceUnavailable || errBody(t, resp, body) != want {
		t.Errorf("second request got %d %q, want 503 %q", resp.StatusCode, body, want)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("answered after %v, want a wait of DialTimeout (100ms) first", d)
	}
}

func TestTLSUpstream(t *testing.T) {
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls=%v host=%s", r.TLS != nil, r.Host)
	}))
	backend.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	backend.StartTLS()
	defer backend.Close()
	roots := x509.NewCertPool()
	roots.AddCert(backend.Certificate())
	target := upstream.NewPool("secure", []*upstream.Instance{{Addr: addrOf(backend), TLS: true}})
	tests := []struct {
		name       string
		tls        *tls.Config
		wantStatus int
		wantBody   string
	}{
		{"trusted certificate", &tls.Config{RootCAs: roots}, 200, "tls=true host=app.test"},
		{"unknown authority", nil, 502, "graygate: upstream \"secure\" unreachable\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, addr := startProxy(t, Options{UpstreamTLS: tt.tls}, staticDecider{Group: "stable", Target: target})
			resp, body := rawExchange(t, addr, "GET", "GET / HTTP/1.1\r\nHost: app.test\r\n\r\n")
			if tt.wantStatus != 200 {
				body = errBody(t, resp, body)
			}
			if resp.StatusCode != tt.wantStatus || body != tt.wantBody {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, body, tt.wantStatus, tt.wantBody)
			}
		})
	}
}
