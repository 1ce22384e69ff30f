package proxy

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/graygate/graygate/internal/listener"
	"github.com/graygate/graygate/internal/mirror"
	"github.com/graygate/graygate/internal/upstream"
)

// TestPipeliningHeldBodies: the pipelining shapes of TestPipeliningShapes
// (several requests in one segment, requests cut into pieces, gaps, a
// half-close after the last) with bodies the gateway holds, some sent at
// once with "Expect: 100-continue" (a 100 may come before the answer). A gray
// decision with a stable fallback, graygate's main use, reads a body of
// up to fallback_body_bytes before it asks an instance, so that it can
// send it again; its chunked bodies carry trailer fields, which a held
// body now sends on (see TestRequestTrailersHeldOrDeclared). Each answer
// must come in order on the same connection and name the pool that served
// it, the body and the trailer field it got: gray when the gray instance
// is up, stable, with the same body and field, when it refuses
// connections. To an http1 pool and to an h2c pool, through the real
// listener, with raw bytes.
func TestPipeliningHeldBodies(t *testing.T) {
	for _, gw := range grayWithFallback(t, listener.Protocols{}) {
		rng := rand.New(rand.NewPCG(13, uint64(gw.proto)))
		for it := range shortened(200) {
			reqs, want := heldRequests(rng, it, gw.serves)
			if err := pipelineHeld(rng, gw.addr, reqs, want); err != nil {
				t.Fatalf("%s: iteration %d: %v", gw.name, it, err)
			}
		}
	}
}

// heldGateway is a gateway of grayWithFallback's.
type heldGateway struct {
	name   string
	proto  upstream.Protocol
	addr   string
	serves string // the pool that answers: "gray", or "stable" when gray refuses
}

// grayWithFallback starts gateways that serve prot, each with a gray
// decision with a stable fallback, to bodyTrailerUpstreams named "gray"
// and "stable": to an http1 and an h2c pool, with the gray instance up,
// and refusing connections.
func grayWithFallback(t *testing.T, prot listener.Protocols) []heldGateway {
	stableUp := bodyTrailerUpstream(t, "stable", nil)
	grayUp := bodyTrailerUpstream(t, "gray", nil)
	var gws []heldGateway
	for _, proto := range []upstream.Protocol{upstream.HTTP1, upstream.H2C} {
		for _, gray := range []struct {
			addr, serves string
		}{{grayUp, "gray"}, {refusedAddr(t), "stable"}} {
			stable := poolOf("stable", stableUp)
			stable.Protocol = proto
			g := poolOf("gray", gray.addr)
			g.Protocol = proto
			_, addr := startProxyWith(t, Options{}, staticDecider{Group: "gray", Target: g, Stable: stable}, prot)
			gws = append(gws, heldGateway{name: fmt.Sprintf("%s pool, served by %s", proto, gray.serves), proto: proto, addr: addr, serves: gray.serves})
		}
	}
	return gws
}

// pipelineHeld sends reqs on one connection to addr in a shape rng picks
// (splitRequests, pipelineGap, a half-close or not), and checks that the
// answers' bodies are want, in order.
func pipelineHeld(rng *rand.Rand, addr string, reqs, want []string) error {
	segs := splitRequests(rng, reqs)
	gap := pipelineGap(rng)
	halfClose := rng.IntN(4) == 0
	err := pipelined(addr, segs, gap, halfClose, func(br *bufio.Reader) error {
		return readAnswersWith(br, len(want), halfClose, func(i, status int, body string) error {
			if status != http.StatusOK || body != want[i] {
				return fmt.Errorf("%d %q, want 200 %q", status, body, want[i])
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("%d requests in %d segments, gap %v, half-close %v: %w", len(reqs), len(segs), gap, halfClose, err)
	}
	return nil
}

// heldRequests makes one to four requests for iteration it: without a
// body, with a Content-Length body, chunked without a trailer section, or
// chunked with an announced X-T field in it, a body sent at once with
// "Expect: 100-continue" or without; and the answer bodyTrailerUpstream
// named serves gives each.
func heldRequests(rng *rand.Rand, it int, serves string) (reqs, want []string) {
	for i := range 1 + rng.IntN(4) {
		path := fmt.Sprintf("/it%d/req%d", it, i)
		body, xt := "", ""
		expect := ""
		if rng.IntN(4) == 0 {
			expect = "Expect: 100-continue\r\n"
		}
		switch rng.IntN(4) {
		case 0:
			reqs = append(reqs, "GET "+path+" HTTP/1.1\r\nHost: a\r\n\r\n")
		case 1:
			body = fmt.Sprintf("cl%d", i)
			reqs = append(reqs, fmt.Sprintf("POST %s HTTP/1.1\r\nHost: a\r\n%sContent-Length: %d\r\n\r\n%s", path, expect, len(body), body))
		case 2:
			body = "abcde"
			reqs = append(reqs, "POST "+path+" HTTP/1.1\r\nHost: a\r\n"+expect+"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
		default:
			body, xt = "abcde", fmt.Sprintf("t%d-%d", it, i)
			reqs = append(reqs, "POST "+path+" HTTP/1.1\r\nHost: a\r\n"+expect+"Trailer: X-T\r\nTransfer-Encoding: chunked\r\n\r\n"+
				"3\r\nabc\r\n2\r\nde\r\n0\r\nX-T: "+xt+"\r\n\r\n")
		}
		want = append(want, serves+" "+path+" "+body+" "+xt)
	}
	return reqs, want
}

// TestPipeliningMirrored: the same pipelined requests, held for a mirror
// (a stable decision whose copies go to a candidate), each connection's
// exchange used again request after request. Every copy the candidate
// gets is the request the primary got: its path, body and X-T trailer
// field, never one of an earlier request on the connection. To an http1
// and an h2c pool, through the real listener, with raw bytes.
func TestPipeliningMirrored(t *testing.T) {
	copies := make(chan string, 4096)
	for _, gw := range mirroredGateways(t, listener.Protocols{}, copies) {
		proto, addr := gw.proto, gw.addr
		rng := rand.New(rand.NewPCG(17, uint64(proto)))
		sent := make(map[string]string) // path: what the primary got
		for it := range shortened(100) {
			reqs, want := heldRequests(rng, it, "stable")
			for _, w := range want {
				path, got, _ := strings.Cut(strings.TrimPrefix(w, "stable "), " ")
				sent[path] = got
			}
			if err := pipelineHeld(rng, addr, reqs, want); err != nil {
				t.Fatalf("%s pool: iteration %d: %v", proto, it, err)
			}
		}
		copiesMatch(t, proto.String()+" pool", gw.set, gw.rule, sent, copies)
	}
}

// mirroredGateway is a gateway of mirroredGateways'.
type mirroredGateway struct {
	proto upstream.Protocol
	addr  string
	rule  string
	set   *mirror.Set
}

// mirroredGateways starts gateways that serve prot, each with a stable
// decision to a bodyTrailerUpstream named "stable" whose GET and POST
// requests (bodies of up to 64 KiB) are mirrored to one named "candidate",
// which reports each copy on copies: to an http1 and an h2c pool.
func mirroredGateways(t *testing.T, prot listener.Protocols, copies chan<- string) []mirroredGateway {
	cand := bodyTrailerUpstream(t, "candidate", copies)
	stableUp := bodyTrailerUpstream(t, "stable", nil)
	var gws []mirroredGateway
	for _, proto := range []upstream.Protocol{upstream.HTTP1, upstream.H2C} {
		rule := "m-" + proto.String()
		stable := poolOf("stable", stableUp)
		stable.Protocol = proto
		set, sp := newMirror(t, rule, poolOf("candidate", cand), []string{"GET", "POST"}, 64<<10, mirror.Options{})
		_, addr := startProxyWith(t, Options{Mirrors: set}, staticDecider{Group: "stable", Target: stable, Mirror: sp}, prot)
		gws = append(gws, mirroredGateway{proto: proto, addr: addr, rule: rule, set: set})
	}
	return gws
}

// copiesMatch waits until every one of the requests sent (path: what the
// primary got, as bodyTrailerUpstream reports it without its name) is
// accounted for by the mirror of rule in set, sent or dropped by a full
// queue, and checks that none failed, some were sent, and each copy the
// candidate reported on copies is what the primary got for its path.
func copiesMatch(t *testing.T, name string, set *mirror.Set, rule string, sent map[string]string, copies <-chan string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var st mirror.Stats
	for {
		for _, s := range set.Stats() {
			if s.Rule == rule {
				st = s
			}
		}
		if int(st.Sent+st.Failed+st.Dropped) >= len(sent) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if int(st.Sent+st.Dropped) != len(sent) || st.Failed != 0 || st.Sent == 0 {
		t.Fatalf("%s: mirror %+v for %d requests; want each sent or dropped, and some sent", name, st, len(sent))
	}
	for range st.Sent {
		c := <-copies
		path, got, _ := strings.Cut(strings.TrimPrefix(c, "candidate "), " ")
		if want, ok := sent[path]; !ok || got != want {
			t.Errorf("%s: the candidate got %s %q; the primary got %q", name, path, got, want)
		}
	}
}

// bodyTrailerUpstream is an upstream named name that speaks HTTP/1.1 and
// h2c and answers each request with its name, path, body and X-T trailer
// field ("gray /p abc t1"), which it also sends on seen if not nil.
func bodyTrailerUpstream(t *testing.T, name string, seen chan<- string) string {
	up := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		got := strings.Join([]string{name, r.URL.Path, string(b), r.Trailer.Get("X-T")}, " ")
		if seen != nil {
			seen <- got
		}
		_, _ = io.WriteString(w, got)
	}))
	return addrOf(up)
}
