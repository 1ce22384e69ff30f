package proxy

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/router"
	"github.com/graygate/graygate/internal/testport"
	"github.com/graygate/graygate/internal/upstream"
)

// refusedAddr returns a loopback address that refuses every connection
// until the test ends (testport.Refused: a closed listener's port could be
// given to another test's server).
func refusedAddr(t *testing.T) string { return testport.Refused(t) }

// TestNextInstanceOnRefusedConnection: an instance whose process died
// (its address still in the pool, not yet ejected) refuses connections.
// Nothing was sent, so the request goes to another instance of the pool,
// as nginx's proxy_next_upstream error does, and the client never sees the
// 502; a body goes along whole. A pool of one has no other: 502.
func TestNextInstanceOnRefusedConnection(t *testing.T) {
	backend, hits := echoBackend(t, "live")
	dead := refusedAddr(t)
	t.Run("two instances", func(t *testing.T) {
		_, gw := startProxy(t, Options{}, staticDecider{Group: "g", Target: poolOf("up", dead, addrOf(backend))})
		sendEach(t, http.DefaultClient, "http://"+gw+"/x", 10, "", "live")
		if n := hits.Load(); n != 10 {
			t.Errorf("the live instance got %d requests, want all 10", n)
		}
	})
	t.Run("one instance", func(t *testing.T) {
		_, gw := startProxy(t, Options{}, staticDecider{Group: "g", Target: poolOf("up", dead)})
		resp, err := http.Get("http://" + gw + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("status %d, want 502: the pool has no other instance", resp.StatusCode)
		}
	})
}

// TestNextInstanceEveryProtocol: the refused instance is skipped for
// every pair of client and pool protocol, not only an HTTP/1.1 client of
// an http1 pool: an HTTP/2 client (its own codec, stream.forward) and an
// h2c pool (net/http's transports, forwardNet and stream.forward) did
// answer 502 before. A body goes along whole.
func TestNextInstanceEveryProtocol(t *testing.T) {
	var hits atomic.Int64
	live := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.Proto+" "+string(b))
	}))
	dead := refusedAddr(t)
	clients := map[string]*http.Client{"h1": {}, "h2c": h2cClient(t)}
	for _, tc := range []struct{ client, pool string }{
		{"h1", "http1"}, {"h2c", "http1"}, {"h1", "h2c"}, {"h2c", "h2c"},
	} {
		t.Run(tc.client+" client, "+tc.pool+" pool", func(t *testing.T) {
			pool := poolOf("up", dead, addrOf(live))
			wantProto := "HTTP/1.1"
			if tc.pool == "h2c" {
				pool.Protocol, wantProto = upstream.H2C, "HTTP/2.0"
			}
			_, gw := startProxyWith(t, Options{}, staticDecider{Group: "g", Target: pool}, listener.Protocols{H2C: true})
			before := hits.Load()
			for i := range 8 {
				var body io.Reader
				method, want := http.MethodGet, wantProto+" "
				if i%2 == 1 {
					method, body, want = http.MethodPost, strings.NewReader("payload"), wantProto+" payload"
				}
				req, _ := http.NewRequest(method, "http://"+gw+"/x", body)
				resp, err := clients[tc.client].Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || string(b) != want {
					t.Fatalf("request %d (%s): %d %q, want 200 %q from the live instance", i, method, resp.StatusCode, b, want)
				}
			}
			if n := hits.Load() - before; n != 8 {
				t.Errorf("the live instance got %d requests, want all 8", n)
			}
		})
	}
}

// TestNextInstanceSkipsEveryRefused: with two dead instances of three, a
// request's third try goes to the live one, never back to the first that
// refused it; over HTTP/1.1 and HTTP/2 clients, with and without a body
// (an HTTP/2 client's body is replayed to the third instance too).
func TestNextInstanceSkipsEveryRefused(t *testing.T) {
	live, hits := echoBackend(t, "live")
	pool := poolOf("up", refusedAddr(t), refusedAddr(t), addrOf(live))
	_, gw := startProxyWith(t, Options{}, staticDecider{Group: "g", Target: pool}, listener.Protocols{H2C: true})
	for name, client := range map[string]*http.Client{"h1": {}, "h2c": h2cClient(t)} {
		t.Run(name, func(t *testing.T) {
			before := hits.Load()
			sendEach(t, client, "http://"+gw+"/x", 12, "", "live") // every place of the rotation
			if n := hits.Load() - before; n != 12 {
				t.Errorf("the live instance got %d requests, want all 12", n)
			}
		})
	}
}

// TestNextInstanceKeepsTheVersion: a request that a version header placed
// (seed 003) and whose instance refused the connection goes to another
// instance of the same version, not to the 502 it got before, and never
// to another version while its version has a live instance. When the
// refusing instance was its version's only one, the retry falls back to
// the pool's others, as a version no healthy instance has does. Over
// HTTP/1.1 and HTTP/2 clients, with and without a body.
func TestNextInstanceKeepsTheVersion(t *testing.T) {
	v1, hits1 := echoBackend(t, "v1")
	v2, hits2 := echoBackend(t, "v2")
	dead2, dead3 := refusedAddr(t), refusedAddr(t)
	meta := func(v string) map[string]string { return map[string]string{"version": v} }
	pool, err := upstream.NewPoolWith("users", []*upstream.Instance{
		{Addr: dead2, Metadata: meta("2")}, {Addr: addrOf(v2), Metadata: meta("2")},
		{Addr: addrOf(v1), Metadata: meta("1")}, {Addr: dead3, Metadata: meta("3")},
	}, upstream.PoolOptions{VersionHeader: "version"})
	if err != nil {
		t.Fatal(err)
	}
	_, gw := startProxyWith(t, Options{}, staticDecider{Group: "g", Target: pool}, listener.Protocols{H2C: true})
	clients := map[string]*http.Client{"h1": {}, "h2c": h2cClient(t)}
	tests := []struct {
		version, want string
		hits          *atomic.Int64
	}{
		{"2", "v2", hits2}, // the other version-2 instance, after dead2 refused
		{"1", "v1", hits1},
		{"3", "", nil}, // dead3 is version 3's only instance: the others take it
	}
	for _, tt := range tests {
		for _, name := range []string{"h1", "h2c"} {
			t.Run("version "+tt.version+" "+name, func(t *testing.T) {
				var before int64
				if tt.hits != nil {
					before = tt.hits.Load()
				}
				sendEach(t, clients[name], "http://"+gw+"/x", 8, tt.version, tt.want) // every place of the rotation
				if tt.hits != nil {
					if n := tt.hits.Load() - before; n != 8 {
						t.Errorf("%s got %d requests, want all 8", tt.want, n)
					}
				}
			})
		}
	}
}

// sendEach sends n requests to url, every other one a POST with a body,
// with the version header when version is set, and fails the test unless
// each is answered 200 by an echo backend (by the one named want, if
// set) that got the whole body.
func sendEach(t *testing.T, client *http.Client, url string, n int, version, want string) {
	t.Helper()
	for i := range n {
		var body io.Reader
		method := http.MethodGet
		if i%2 == 1 {
			method, body = http.MethodPost, strings.NewReader("payload")
		}
		req, _ := http.NewRequest(method, url, body)
		if version != "" {
			req.Header.Set("version", version)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got := resp.Header.Get("X-Backend")
		if resp.StatusCode != http.StatusOK || (want != "" && got != want) || (body != nil && !strings.Contains(string(b), "payload")) {
			t.Fatalf("request %d (%s, version %q): %d from %q %q, want 200 from %q with the body", i, method, version, resp.StatusCode, got, b, want)
		}
	}
}

// TestNextInstanceThenStable: a gray pool whose every instance refuses
// the connection falls back to stable with the whole body, however large
// (over fallback_body_bytes, so it streams): nothing of it was read, as
// when the next instance of a pool gets it. For HTTP/1.1 and HTTP/2
// clients, toward http1 and h2c gray pools. An HTTP/1.1 client toward an
// http1 pool got a 502 before.
func TestNextInstanceThenStable(t *testing.T) {
	stable, hits := echoBackend(t, "stable")
	body := strings.Repeat("0123456789abcdef", 4<<10) // 64 KiB, over FallbackBodyBytes
	clients := map[string]*http.Client{"h1": {}, "h2c": h2cClient(t)}
	for _, proto := range []upstream.Protocol{upstream.HTTP1, upstream.H2C} {
		gray := poolOf("gray", refusedAddr(t), refusedAddr(t))
		gray.Protocol = proto
		d := staticDecider{Group: "gray", Target: gray, Stable: poolOf("stable", addrOf(stable)), Policy: &router.Policy{FallbackBodyBytes: 1 << 10}}
		_, gw := startProxyWith(t, Options{}, d, listener.Protocols{H2C: true})
		for _, name := range []string{"h1", "h2c"} {
			t.Run(name+" client, "+proto.String()+" gray pool", func(t *testing.T) {
				before := hits.Load()
				for i := range 4 {
					resp, err := clients[name].Post("http://"+gw+"/x", "text/plain", strings.NewReader(body))
					if err != nil {
						t.Fatal(err)
					}
					var e echo
					err = json.NewDecoder(resp.Body).Decode(&e)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK || err != nil || e.Name != "stable" || e.BodyLen != int64(len(body)) {
						t.Fatalf("request %d: %d, %d bytes, %v; want stable's answer with the %d bytes", i, resp.StatusCode, e.BodyLen, err, len(body))
					}
				}
				if n := hits.Load() - before; n != 4 {
					t.Errorf("stable got %d requests, want 4", n)
				}
			})
		}
	}
}

// TestStreamedFallbackThenPipelined: after a large body streamed to stable
// because the gray connection was refused, the request pipelined behind
// it on the same client connection is read from where that body ended and
// answered in order, whether the bytes came in one write or in parts.
func TestStreamedFallbackThenPipelined(t *testing.T) {
	stable, _ := echoBackend(t, "stable")
	d := staticDecider{Group: "gray", Target: poolOf("gray", refusedAddr(t)), Stable: poolOf("stable", addrOf(stable)), Policy: &router.Policy{FallbackBodyBytes: 1 << 10}}
	_, gw := startProxy(t, Options{}, d)
	req := "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\n\r\n" + strings.Repeat("x", 64<<10) + "GET /b HTTP/1.1\r\nHost: x\r\n\r\n"
	for name, cuts := range map[string][]int{"one write": nil, "in parts": {100, 40000}} {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", gw)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			from := 0
			for _, to := range append(cuts, len(req)) {
				if _, err := io.WriteString(c, req[from:to]); err != nil {
					t.Fatal(err)
				}
				from = to
				time.Sleep(20 * time.Millisecond)
			}
			br := bufio.NewReader(c)
			for i, want := range []string{"/a", "/b"} {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("answer %d: %v", i, err)
				}
				var e echo
				err = json.NewDecoder(resp.Body).Decode(&e)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || err != nil || e.URI != want || (want == "/a" && e.BodyLen != 64<<10) {
					t.Fatalf("answer %d: %d %q, %d bytes, %v; want stable's answer to %s", i, resp.StatusCode, e.URI, e.BodyLen, err, want)
				}
			}
		})
	}
}
