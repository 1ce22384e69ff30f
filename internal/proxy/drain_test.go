package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/graygate/graygate/internal/listener"
)

// TestDrainClosesKeepAlive: once Drain is called (the gateway's
// drain_delay begins) every HTTP/1.1 answer carries "Connection: close"
// and its connection closes after it, so a keep-alive client opens its
// next connection elsewhere instead of sending its next request on one
// that the listener's close cuts (a request lost with a bare EOF, found by
// the live-operations audit: one per keep-alive client per handover).
func TestDrainClosesKeepAlive(t *testing.T) {
	backend, _ := echoBackend(t, "stable")
	p, addr := startProxy(t, Options{}, staticDecider{Group: "g", Target: poolOf("stable", addrOf(backend))})
	c := dialBounded(t, addr, 5*time.Second)
	defer c.Close()
	br := bufio.NewReader(c)
	get := func() *http.Response {
		t.Helper()
		if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := get(); resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("before Drain: %d, close %v; want 200 on a kept connection", resp.StatusCode, resp.Close)
	}
	p.Drain()
	if resp := get(); resp.StatusCode != http.StatusOK || !resp.Close {
		t.Fatalf("after Drain: %d, close %v; want 200 with Connection: close", resp.StatusCode, resp.Close)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after the draining answer the connection gave %v, want EOF: it closes", err)
	}
}

// h2Peer is a raw HTTP/2 client connection: the frames themselves, so a
// test sees the GOAWAY that a client library would act on silently.
type h2Peer struct {
	t  *testing.T
	c  net.Conn
	fr *http2.Framer
}

func dialH2Peer(t *testing.T, addr string) *h2Peer {
	t.Helper()
	c := dialBounded(t, addr, 10*time.Second)
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return &h2Peer{t: t, c: c, fr: fr}
}

// get opens stream id with a GET of path.
func (h *h2Peer) get(id uint32, path string) {
	h.t.Helper()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "drain.test"}, {":path", path}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		h.t.Fatal(err)
	}
}

// events reads frames until the connection ends and names what came, in
// order: "headers:<stream>:<status>" (or "headers:<stream>:<status>:connection"
// when a connection field leaked), "end:<stream>" for a stream's last
// frame, "goaway:<code>:<last stream>", and "eof". Settings and pings are
// answered and not named.
func (h *h2Peer) events() []string {
	h.t.Helper()
	var got []string
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return append(got, "eof")
			}
			return append(got, "err:"+err.Error())
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = h.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = h.fr.WritePing(true, f.Data)
			}
		case *http2.HeadersFrame:
			fields, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				h.t.Fatal(err)
			}
			ev := fmt.Sprintf("headers:%d", f.StreamID)
			for _, hf := range fields {
				switch hf.Name {
				case ":status":
					ev += ":" + hf.Value
				case "connection":
					ev += ":connection"
				}
			}
			got = append(got, ev)
			if f.StreamEnded() {
				got = append(got, fmt.Sprintf("end:%d", f.StreamID))
			}
		case *http2.DataFrame:
			if f.StreamEnded() {
				got = append(got, fmt.Sprintf("end:%d", f.StreamID))
			}
		case *http2.GoAwayFrame:
			got = append(got, fmt.Sprintf("goaway:%v:%d", f.ErrCode, f.LastStreamID))
		}
	}
}

// TestDrainSendsH2GoAway: what Connection: close is to an HTTP/1.1 client
// (TestDrainClosesKeepAlive), a graceful GOAWAY is to an HTTP/2 one. Once
// Drain is called, every open HTTP/2 connection gets one at once, idle or
// not, and its streams in flight still finish; a connection opened during
// the drain gets one with its first answer. Before, HTTP/2 clients heard
// nothing until the listeners closed, and sent their next requests on
// connections about to go.
func TestDrainSendsH2GoAway(t *testing.T) {
	release := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(backend.Close)
	d := staticDecider{Group: "stable", Target: poolOf("stable", addrOf(backend))}
	p, addr := startProxyWith(t, Options{}, d, listener.Protocols{H2C: true})

	// idle: one answered stream, then nothing in flight at Drain.
	idle := dialH2Peer(t, addr)
	idle.get(1, "/fast")
	// busy: a stream still waiting on the upstream at Drain.
	busy := dialH2Peer(t, addr)
	busy.get(1, "/slow")
	idleEv := make(chan []string, 1)
	busyEv := make(chan []string, 1)
	go func() { idleEv <- idle.events() }()
	go func() { busyEv <- busy.events() }()
	// Drain only once both streams have reached the gateway.
	deadline := time.Now().Add(5 * time.Second)
	for p.H2Conns() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	p.Drain()
	// Opened during the drain.
	late := dialH2Peer(t, addr)
	late.get(1, "/fast")
	lateEv := make(chan []string, 1)
	go func() { lateEv <- late.events() }()
	time.Sleep(100 * time.Millisecond)
	close(release)

	wait := func(name string, ch chan []string, want []string) {
		t.Helper()
		select {
		case got := <-ch:
			if !slices.Equal(got, want) {
				t.Errorf("%s connection: %q, want %q", name, got, want)
			}
		case <-time.After(8 * time.Second):
			t.Errorf("%s connection: no GOAWAY and close within 8s of Drain", name)
		}
	}
	wait("idle", idleEv, []string{"headers:1:200", "end:1", "goaway:NO_ERROR:1", "eof"})
	wait("busy", busyEv, []string{"goaway:NO_ERROR:1", "headers:1:200", "end:1", "eof"})
	// The late connection's GOAWAY is asked for as its answer's header
	// goes out: it may come before or after that header.
	select {
	case got := <-lateEv:
		rest := slices.DeleteFunc(slices.Clone(got), func(e string) bool { return e == "goaway:NO_ERROR:1" })
		if len(rest) != len(got)-1 || !slices.Equal(rest, []string{"headers:1:200", "end:1", "eof"}) {
			t.Errorf("late connection: %q, want its answer, one GOAWAY (NO_ERROR, last stream 1) and the close", got)
		}
	case <-time.After(8 * time.Second):
		t.Error("late connection: no GOAWAY and close within 8s of its answer")
	}
}
