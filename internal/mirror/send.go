package mirror

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/graygate/graygate/internal/upstream"
)

// MirrorHeader marks a mirrored request, so that the mirror target (and
// whatever it calls) can tell shadow traffic from real traffic.
const MirrorHeader = "X-Gray-Mirror"

// dropRequestFields are the request fields a copy never carries: the
// hop-by-hop ones (RFC 9110 section 7.6.1), the framing ones (the body is
// in memory and its length known), Expect (nothing waits for a 100) and
// the gateway's own marker, which is set afresh.
var dropRequestFields = []string{
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length", "Expect", "Host", MirrorHeader,
}

// ShadowHost appends suffix to the host part of a Host value, keeping the
// port, as Envoy does: "api.example.com:8080" becomes
// "api.example.com-shadow:8080". An IPv6 literal is left alone, since a
// suffix would make it an invalid Host.
func ShadowHost(host, suffix string) string {
	if suffix == "" || host == "" || strings.HasPrefix(host, "[") {
		return host
	}
	if h, port, err := net.SplitHostPort(host); err == nil {
		return net.JoinHostPort(h+suffix, port)
	}
	return host + suffix
}

// process sends one copy to the mirror target (and the secondary, at the
// same time) and records the comparison.
func (st *state) process(j job) {
	s, sp := st.set, j.spec
	var (
		wg     sync.WaitGroup
		sec    *answer
		secErr error
	)
	if sp.Diff && sp.Secondary != nil {
		wg.Go(func() { sec, secErr = s.send(st.ctx, sp.Secondary, sp, &j.req, &st.http10) })
	}
	cand, err := s.send(st.ctx, sp.Target, sp, &j.req, &st.http10)
	wg.Wait()
	if st.ctx.Err() != nil {
		return // the mirror stopped: the exchange was cut, not failed
	}
	if err != nil {
		st.ctr.failed.Add(1)
		s.opts.Logger.Debug("mirror copy failed", "rule", sp.Rule, "target", sp.TargetName, "err", err)
	} else {
		st.ctr.sent.Add(1)
	}
	if secErr != nil {
		s.opts.Logger.Debug("mirror copy to the secondary failed", "rule", sp.Rule, "target", sp.SecondaryName, "err", secErr)
	}
	primary := answerOf(&j.primary)
	st.record(sp, &j.req, primary, cand, err, sec, secErr)
}

// answerOf turns the data plane's copy of the primary's answer into one the
// diff reads.
func answerOf(r *Response) *answer {
	h := make(http.Header, len(r.Header))
	for _, f := range r.Header {
		h.Add(f.Name, f.Value)
	}
	return &answer{status: r.Status, header: h, body: r.Body, truncated: r.BodyTruncated}
}

// send makes one exchange with an instance of pool: the request as the
// primary got it, with the shadow Host and X-Gray-Mirror: 1, and reads at
// most MaxResponseBody bytes of the answer. The instance's in-flight
// count is kept, its passive health is not touched (Pool.Release).
// http10 holds the instances whose last answer came over HTTP/1.0; send
// keeps it up to date.
func (s *Set) send(ctx context.Context, pool *upstream.Pool, sp *Spec, r *Request, http10 *sync.Map) (*answer, error) {
	if !strings.HasPrefix(r.URI, "/") {
		return nil, fmt.Errorf("request-target %q is not in origin form", r.URI)
	}
	inst, err := pool.Pick()
	if err != nil {
		return nil, err
	}
	defer pool.Release(inst)
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	scheme := "http"
	if inst.TLS {
		scheme = "https"
	}
	var body io.Reader = http.NoBody
	if len(r.Body) > 0 {
		body = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, scheme+"://"+inst.Addr+"/", body)
	if err != nil {
		return nil, fmt.Errorf("build the mirrored request: %w", err)
	}
	// The request-target is sent byte for byte as the primary got it.
	req.URL.Path, req.URL.Opaque = "", r.URI
	req.ContentLength = int64(len(r.Body))
	_, to10 := http10.Load(inst.Addr)
	if len(r.Trailer) > 0 && !to10 {
		// Chunked, so that the trailer section can follow the body
		// (net/http's Transport writes req.Trailer only then), even an
		// empty one. An instance that answers over HTTP/1.0 may not
		// read chunked (RFC 9112 section 6.1): it gets the body with
		// its length, and no trailer section, which HTTP/1.0 has none
		// of.
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(r.Body)), nil }
		req.Body, _ = req.GetBody()
		req.ContentLength = -1
		req.Trailer = make(http.Header, len(r.Trailer))
		for _, f := range r.Trailer {
			req.Trailer.Add(f.Name, f.Value)
		}
	}
	var named []string
	for _, f := range r.Header {
		if strings.EqualFold(f.Name, "Connection") {
			for _, t := range strings.Split(f.Value, ",") {
				named = append(named, strings.TrimSpace(t))
			}
		}
	}
	for _, f := range r.Header {
		if dropped(f.Name, named) {
			continue
		}
		req.Header.Add(f.Name, f.Value)
	}
	req.Header.Set(MirrorHeader, "1")
	host := r.Host
	if host == "" {
		host = inst.Addr
	}
	req.Host = ShadowHost(host, sp.HostSuffix)
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if now10 := resp.ProtoMajor == 1 && resp.ProtoMinor == 0; now10 && !to10 {
		http10.Store(inst.Addr, struct{}{})
	} else if to10 && !now10 {
		http10.Delete(inst.Addr)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, s.opts.MaxResponseBody+1))
	if err != nil {
		return nil, fmt.Errorf("read the mirror's answer: %w", err)
	}
	a := &answer{status: resp.StatusCode, header: resp.Header, body: b}
	if int64(len(b)) > s.opts.MaxResponseBody {
		a.body, a.truncated = b[:s.opts.MaxResponseBody], true
	}
	return a, nil
}

func dropped(name string, named []string) bool {
	for _, d := range dropRequestFields {
		if strings.EqualFold(name, d) {
			return true
		}
	}
	for _, d := range named {
		if strings.EqualFold(name, d) {
			return true
		}
	}
	return false
}
