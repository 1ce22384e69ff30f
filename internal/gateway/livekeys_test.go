package gateway

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
	"github.com/redis/go-redis/v9"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"

	"github.com/graygate/graygate/internal/certs/certstest"
	"github.com/graygate/graygate/internal/config"
	"github.com/graygate/graygate/internal/tags/redistest"
	"github.com/graygate/graygate/internal/testport"
	"github.com/graygate/graygate/internal/testserve"
)

// liveCase proves one live key: a gateway started with before answers a
// probe one way, and after a real reload to after (which differs from
// before in that key only) the other way, with nothing named as needing a
// restart.
type liveCase struct {
	key string
	// before and after are whole configs; {{stable}}, {{gray}}, {{a}} and
	// {{b}} are the harness's backends, other {{names}} what prep sets in
	// fixture.repl.
	before, after string
	// prep runs before the gateway starts (backends, files, environment).
	prep func(t *testing.T, fx *fixture)
	// setup runs once the gateway serves, before the first probe.
	setup func(t *testing.T, e *env, fx *fixture)
	// probe asks the gateway (through its listeners wherever the key
	// affects traffic) and says what it does, in one string; fx.phase is
	// 0 before the reload and 1 after.
	probe                 func(t *testing.T, e *env, fx *fixture) string
	wantBefore, wantAfter string
	// run, when set, is the whole case: keys whose effect is not a
	// request's answer (how the gateway stops, the TLS listener).
	run func(t *testing.T)
}

// fixture is what a case's prep makes for its probes.
type fixture struct {
	repl  map[string]string
	echo  map[string]*echo
	phase int
	n     atomic.Int64 // for fresh identities
	vals  map[string]any
}

func (fx *fixture) set(k, v string) {
	if fx.repl == nil {
		fx.repl = map[string]string{}
	}
	fx.repl[k] = v
}

// fresh returns an identity no earlier probe of the case used.
func (fx *fixture) fresh(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, fx.phase, fx.n.Add(1))
}

func (fx *fixture) fill(y string) string {
	for k, v := range fx.repl {
		y = strings.ReplaceAll(y, "{{"+k+"}}", v)
	}
	return y
}

// TestLiveKeysApply runs liveCases: every live key without an older test
// of its own is changed by a real reload of a serving gateway, and the
// next requests (or the status, for settings that only show there) take
// the new value.
func TestLiveKeysApply(t *testing.T) {
	for _, tc := range liveCases {
		t.Run(tc.key, func(t *testing.T) {
			if tc.run != nil {
				tc.run(t)
				return
			}
			fx := &fixture{echo: map[string]*echo{}, vals: map[string]any{}}
			if tc.prep != nil {
				tc.prep(t, fx)
			}
			e := start(t, fx.fill(tc.before), "")
			if tc.setup != nil {
				tc.setup(t, e, fx)
			}
			if got := tc.probe(t, e, fx); got != tc.wantBefore {
				t.Fatalf("before the reload: %q, want %q", got, tc.wantBefore)
			}
			if err := e.reload(fx.fill(tc.after)); err != nil {
				t.Fatalf("reload: %v", err)
			}
			if st := e.gw.Status(); st.LastResult != "ok" || len(st.RestartRequired) != 0 {
				t.Errorf("a live change reported %q, restart required %v", st.LastResult, st.RestartRequired)
			}
			fx.phase = 1
			if got := tc.probe(t, e, fx); got != tc.wantAfter {
				t.Errorf("after the reload: %q, want %q", got, tc.wantAfter)
			}
		})
	}
}

// echo is a backend that says what it saw in response headers, and has
// paths that stall, hold, fail or stream on demand.
type echo struct {
	name   string
	addr   string
	probes atomic.Int64 // requests to the health paths
	// bad makes /toggle answer 500.
	bad atomic.Bool
	// hold is closed to let requests to /hold go; arrived counts them.
	mu      sync.Mutex
	hold    chan struct{}
	arrived atomic.Int64
	active  atomic.Int64
	peak    atomic.Int64
}

func (b *echo) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		sleep := func(d time.Duration) bool {
			select {
			case <-time.After(d):
				return true
			case <-r.Context().Done():
				return false
			}
		}
		switch {
		case p == "/healthz":
			b.probes.Add(1)
			return
		case p == "/bad":
			b.probes.Add(1)
			w.WriteHeader(500)
			return
		case p == "/slowhealth":
			b.probes.Add(1)
			sleep(time.Second)
			return
		case p == "/toggle":
			b.probes.Add(1)
			if b.bad.Load() {
				w.WriteHeader(500)
			}
			return
		case strings.Contains(p, "/sleep/"):
			d, _ := time.ParseDuration(p[strings.LastIndex(p, "/")+1:])
			b.arrived.Add(1)
			if !sleep(d) {
				return
			}
		case strings.HasSuffix(p, "/hold"):
			b.mu.Lock()
			ch := b.hold
			b.mu.Unlock()
			b.arrived.Add(1)
			select {
			case <-ch:
			case <-r.Context().Done():
			case <-time.After(20 * time.Second):
			}
		case strings.HasSuffix(p, "/pair"):
			// Waits for a second request in flight with it, for up to
			// 2s, and records how many were in flight at once.
			n := b.active.Add(1)
			defer b.active.Add(-1)
			for {
				if pk := b.peak.Load(); n <= pk || b.peak.CompareAndSwap(pk, n) {
					break
				}
			}
			deadline := time.Now().Add(2 * time.Second)
			for b.active.Load() < 2 && time.Now().Before(deadline) && r.Context().Err() == nil {
				time.Sleep(5 * time.Millisecond)
			}
			if n := b.active.Load(); n > b.peak.Load() {
				b.peak.Store(n)
			}
		case strings.HasSuffix(p, "/stall"):
			// Ten bytes promised, three sent, the rest after a pause.
			w.Header().Set("Content-Length", "10")
			_, _ = io.WriteString(w, "abc")
			w.(http.Flusher).Flush()
			if !sleep(1500 * time.Millisecond) {
				return
			}
			_, _ = io.WriteString(w, "defghij")
			return
		case strings.HasSuffix(p, "/noread"):
			// Reads nothing of the body for 2s, then all of it.
			if !sleep(2 * time.Second) {
				return
			}
		case strings.HasSuffix(p, "/big"):
			chunk := make([]byte, 1<<20)
			w.Header().Set("Content-Length", strconv.Itoa(32<<20))
			for range 32 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			return
		}
		n, _ := io.Copy(io.Discard, r.Body)
		under := "no"
		for k := range r.Header {
			if strings.Contains(k, "_") {
				under = "yes"
			}
		}
		h := w.Header()
		h.Set("X-Backend", b.name)
		h.Set("X-Echo-Host", r.Host)
		h.Set("X-Echo-Via", r.Header.Get("Via"))
		h.Set("X-Echo-Proto", r.Proto)
		h.Set("X-Echo-Remote", r.RemoteAddr)
		h.Set("X-Echo-Underscore", under)
		h.Set("X-Echo-Body", strconv.FormatInt(n, 10))
		_, _ = io.WriteString(w, b.name)
	})
}

// newEcho starts an echo backend (HTTP/1.1, and h2c with prior knowledge)
// and records its address as {{name}}.
func newEcho(t *testing.T, fx *fixture, name string) *echo {
	b := &echo{name: name, hold: make(chan struct{})}
	srv := httptest.NewServer(h2c.NewHandler(b.handler(), &http2.Server{}))
	t.Cleanup(srv.Close)
	b.addr = strings.TrimPrefix(srv.URL, "http://")
	fx.echo[name] = b
	fx.set(name, b.addr)
	return b
}

// release lets the requests held at /hold go, and arms a new hold.
func (b *echo) release() {
	b.mu.Lock()
	close(b.hold)
	b.hold = make(chan struct{})
	b.mu.Unlock()
}

// deadAddr is a loopback address nothing listens on: connecting is refused.
func deadAddr(t *testing.T) string { return testport.Refused(t) }

// resetAddr is a loopback address whose server reads a request, body and
// all, then resets the connection without an answer.
func resetAddr(t *testing.T) string {
	return testserve.Conns(t, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if req, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
			_, _ = io.Copy(io.Discard, req.Body)
		}
		_ = c.(*net.TCPConn).SetLinger(0) // close with RST
		_ = c.Close()
	})
}

// do sends one request through the data plane.
func (e *env) do(method, path string, body io.Reader, hdr ...string) (*http.Response, string, error) {
	req, err := http.NewRequest(method, e.data+path, body)
	if err != nil {
		return nil, "", err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header[hdr[i]] = append(req.Header[hdr[i]], hdr[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// status is the status of one request, or the error.
func (e *env) status(method, path string, body io.Reader, hdr ...string) string {
	resp, _, err := e.do(method, path, body, hdr...)
	if err != nil {
		return "error: " + err.Error()
	}
	return strconv.Itoa(resp.StatusCode)
}

// header is one response header of a GET, or the error.
func (e *env) header(path, name string, hdr ...string) string {
	resp, _, err := e.do("GET", path, nil, hdr...)
	if err != nil {
		return "error: " + err.Error()
	}
	return resp.Header.Get(name)
}

// group is the X-Gray-Group of a GET.
func (e *env) group(path string, hdr ...string) string {
	a, err := e.get(path, hdr...)
	if err != nil {
		return "error: " + err.Error()
	}
	return a.group
}

// count sends n GETs and counts the answers from backend.
func (e *env) count(n int, path, backend string, hdr ...string) string {
	c := 0
	for range n {
		if e.header(path, "X-Backend", hdr...) == backend {
			c++
		}
	}
	return strconv.Itoa(c)
}

// echoCfg is a config whose default upstream is "echo", defined as up
// ({{echo}} when empty), with the harness's upstreams and extra after.
func echoCfg(up, extra string) string {
	if up == "" {
		up = `{instances: [{addr: "{{echo}}"}]}`
	}
	return strings.Replace(baseConfig, "default_upstream: stable", "default_upstream: echo", 1) +
		"  echo:   " + up + "\n" + extra + "\n"
}

func prepEcho(t *testing.T, fx *fixture) { newEcho(t, fx, "echo") }

// prepTwo starts backends e1 and e2.
func prepTwo(t *testing.T, fx *fixture) {
	newEcho(t, fx, "e1")
	newEcho(t, fx, "e2")
}

func putRule(key string, rule any) func(t *testing.T, e *env, fx *fixture) {
	return func(t *testing.T, e *env, fx *fixture) { e.mustPut(key, rule) }
}

// vipRule sends the user vip to gray.
var vipRule = map[string]any{"type": "gray", "gray_percent": 0, "white_list": []string{"uid:vip"},
	"targets": map[string]string{"gray": "gray", "stable": "stable"}}

// beijingRule sends requests from 北京 under /region/ to gray.
var beijingRule = map[string]any{"type": "gray", "gray_percent": 100, "targets": map[string]string{"gray": "gray", "stable": "stable"},
	"conditions": map[string]any{"path_prefix": []string{"/region/"}, "region_in": []string{"北京"}}}

// vipTagRule sends requests with the tag vip under /tags/ to gray.
var vipTagRule = map[string]any{"type": "gray", "gray_percent": 100, "targets": map[string]string{"gray": "gray", "stable": "stable"},
	"conditions": map[string]any{"path_prefix": []string{"/tags/"}, "tags": []map[string]any{{"tag": "vip", "operator": "eq", "value": true}}}}

// breakerCase changes one breaker setting and reads it back from the
// status: the gray rule's breaker is reconfigured in place (the hot path
// reads the breaker's settings, which the status shows).
func breakerCase(key, value, before, after string) liveCase {
	field := strings.TrimPrefix(key, "breaker.")
	return liveCase{
		key: key, before: baseConfig, after: baseConfig + fmt.Sprintf("breaker: {%s: %s}\n", field, value),
		setup: putRule("canary", grayRule(1)),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			_, st := e.api("GET", "/api/v1/status", nil)
			bs, _ := st["breakers"].([]any)
			if len(bs) != 1 {
				return fmt.Sprint("breakers: ", bs)
			}
			c, _ := bs[0].(map[string]any)["config"].(map[string]any)
			return fmt.Sprint(c[field])
		},
		wantBefore: before, wantAfter: after,
	}
}

// v6Limit is config for a gateway that knows every client by its address
// (behind a trusted proxy on loopback, so X-Forwarded-For names it) and
// lets each one request; identity gets extra.
func v6Limit(extra string) string {
	return "trusted_proxies: [\"127.0.0.1/32\"]\nidentity: {sources: [], anonymous: ip" + extra + "}\n" +
		"limits: {rate_limit: {rps: 0.001, burst: 1, per_identity: true}}\n"
}

// limitCases are the cases of one place limits are set: the top-level
// limits (for requests no route owns) or a route's. wrap turns a limits
// body ("timeout: 100ms") into config; path is a path it covers.
func limitCases(prefix string, wrap func(limits string) string, path string) []liveCase {
	rl := func(body string) string { return wrap("rate_limit: {" + body + "}") }
	getAs := func(e *env, uid string) string { return e.status("GET", path, nil, "X-User-Id", uid) }
	return []liveCase{
		{
			key: prefix + "timeout", prep: prepEcho,
			before: echoCfg("", wrap("")), after: echoCfg("", wrap("timeout: 100ms")),
			probe: func(t *testing.T, e *env, fx *fixture) string {
				return e.status("GET", path+"sleep/2s", nil)
			},
			wantBefore: "200", wantAfter: "504",
		},
		{
			// A gray rule whose gray target reads a PUT's body and then
			// resets the connection: a body the gateway buffered is
			// replayed on stable; one it streamed was read and is gone.
			// (A target that refuses the connection read nothing, so
			// even a streamed body goes to stable.)
			key:    prefix + "fallback_body_bytes",
			prep:   func(t *testing.T, fx *fixture) { fx.set("dead", resetAddr(t)) },
			before: strings.Replace(baseConfig, `"{{gray}}"`, `"{{dead}}"`, 1) + wrap("") + "\n",
			after:  strings.Replace(baseConfig, `"{{gray}}"`, `"{{dead}}"`, 1) + wrap("fallback_body_bytes: 100") + "\n",
			setup:  putRule("canary", grayRule(100)),
			probe: func(t *testing.T, e *env, fx *fixture) string {
				resp, _, err := e.do("PUT", path, strings.NewReader(strings.Repeat("x", 1000)), "X-User-Id", "u1")
				if err != nil {
					return "error: " + err.Error()
				}
				return fmt.Sprint(resp.StatusCode, " ", resp.Header.Get("X-Gray-Degraded"))
			},
			wantBefore: "200 fallback", wantAfter: "502 ",
		},
		{
			// The bucket is empty; at 1000 rps it refills at once.
			key: prefix + "rate_limit.rps", before: baseConfig + rl("rps: 0.001, burst: 1"), after: baseConfig + rl("rps: 1000, burst: 1"),
			setup: func(t *testing.T, e *env, fx *fixture) { getAs(e, "setup") },
			probe: func(t *testing.T, e *env, fx *fixture) string {
				time.Sleep(50 * time.Millisecond)
				return getAs(e, "u")
			},
			wantBefore: "429", wantAfter: "200",
		},
		{
			// A new identity's bucket starts full: burst requests pass.
			key:    prefix + "rate_limit.burst",
			before: baseConfig + rl("rps: 0.001, burst: 1, per_identity: true"), after: baseConfig + rl("rps: 0.001, burst: 3, per_identity: true"),
			probe: func(t *testing.T, e *env, fx *fixture) string {
				id := fx.fresh("burst")
				return strings.Join([]string{getAs(e, id), getAs(e, id), getAs(e, id)}, " ")
			},
			wantBefore: "200 429 429", wantAfter: "200 200 200",
		},
		{
			key:    prefix + "rate_limit.per_identity",
			before: baseConfig + rl("rps: 0.001, burst: 1"), after: baseConfig + rl("rps: 0.001, burst: 1, per_identity: true"),
			setup:      func(t *testing.T, e *env, fx *fixture) { getAs(e, "setup") },
			probe:      func(t *testing.T, e *env, fx *fixture) string { return getAs(e, fx.fresh("pi")) },
			wantBefore: "429", wantAfter: "200",
		},
		{
			// With room for one identity, a second one evicts the first,
			// which then starts again with a full bucket.
			key:    prefix + "rate_limit.max_identities",
			before: baseConfig + rl("rps: 0.001, burst: 1, per_identity: true"), after: baseConfig + rl("rps: 0.001, burst: 1, per_identity: true, max_identities: 1"),
			probe: func(t *testing.T, e *env, fx *fixture) string {
				first := fx.fresh("first")
				getAs(e, first)
				getAs(e, fx.fresh("second"))
				return getAs(e, first)
			},
			wantBefore: "429", wantAfter: "200",
		},
		{
			// 64 KiB holds about 150 identities of 200 bytes.
			key:    prefix + "rate_limit.max_identity_bytes",
			before: baseConfig + rl("rps: 0.001, burst: 1, per_identity: true"), after: baseConfig + rl("rps: 0.001, burst: 1, per_identity: true, max_identity_bytes: 65536"),
			probe: func(t *testing.T, e *env, fx *fixture) string {
				long := func(id string) string { return id + strings.Repeat("x", 200-len(id)) }
				first := long(fx.fresh("first"))
				getAs(e, first)
				for range 200 {
					getAs(e, long(fx.fresh("other")))
				}
				return getAs(e, first)
			},
			wantBefore: "429", wantAfter: "200",
		},
	}
}

// jwtTok signs claims (with an hour to live unless they say otherwise).
func jwtTok(t *testing.T, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	if _, ok := claims["exp"]; !ok {
		claims["exp"] = time.Now().Add(time.Hour).Unix()
	}
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const (
	secretS = "ssssssssssssssssssssssssssssssss"
	secretT = "tttttttttttttttttttttttttttttttt"
)

// prepSecret writes the HS256 secret secretS to {{secret}}.
func prepSecret(t *testing.T, fx *fixture) {
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(secretS), 0o600); err != nil {
		t.Fatal(err)
	}
	fx.set("secret", p)
}

// jwtCfg is a config that takes identities only from tokens configured by
// jwtBody (a targeting.tags.jwt section's body).
func jwtCfg(jwtBody, extra string) string {
	return baseConfig + "identity: {jwt: only, anonymous: ip}\ntargeting: {tags: {jwt: {" + jwtBody + "}}" + extra + "}\n"
}

// hsGroup is the group of a request carrying an HS256 token for claims.
func hsGroup(t *testing.T, e *env, secret string, claims jwt.MapClaims, hdr ...string) string {
	tok := jwtTok(t, jwt.SigningMethodHS256, []byte(secret), "", claims)
	if len(hdr) == 0 {
		hdr = []string{"Authorization", "Bearer " + tok}
	} else {
		hdr[len(hdr)-1] += tok
	}
	return e.group("/", hdr...)
}

// ecKey makes a P-256 key, and writes its public key as PEM and as a JWKS
// with kid to dir.
func ecKey(t *testing.T, dir, kid string) (*ecdsa.PrivateKey, string, string) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	pemPath := filepath.Join(dir, kid+".pem")
	os.WriteFile(pemPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600)
	jwksPath := filepath.Join(dir, kid+".jwks")
	os.WriteFile(jwksPath, jwksOf(kid, k), 0o600)
	return k, pemPath, jwksPath
}

func jwksOf(kid string, k *ecdsa.PrivateKey) []byte {
	b, _ := k.PublicKey.Bytes()
	enc := base64.RawURLEncoding.EncodeToString
	out, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "EC", "crv": "P-256", "kid": kid, "x": enc(b[1:33]), "y": enc(b[33:])}}})
	return out
}

// tgtCfg returns the serving targeting section, as its resolvers were
// built from it, as JSON.
func tgtCfg(e *env, pick func(c config.Targeting) any) string {
	b, _ := json.Marshal(pick(e.gw.tgt.Load().cfg))
	return string(b)
}

// regionCfg is a config that believes the loopback peer's region sources
// as region (a targeting.region body), with the rule for 北京.
func regionCfg(region, extra string) string {
	return baseConfig + "trusted_proxies: [\"127.0.0.1/32\"]\ntargeting: {region: {" + region + "}" + extra + "}\n"
}

// geoDB writes a GeoIP database placing 1.2.3.0/24 in 北京.
func geoDB(t *testing.T) string {
	tree, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: "GeoLite2-City", Languages: []string{"en", "zh-CN"}, RecordSize: 28})
	if err != nil {
		t.Fatal(err)
	}
	names := func(en, zh string) mmdbtype.Map {
		return mmdbtype.Map{"en": mmdbtype.String(en), "zh-CN": mmdbtype.String(zh)}
	}
	_, n, _ := net.ParseCIDR("1.2.3.0/24")
	if err := tree.Insert(n, mmdbtype.Map{
		"country":      mmdbtype.Map{"iso_code": mmdbtype.String("CN"), "names": names("China", "中国")},
		"subdivisions": mmdbtype.Slice{mmdbtype.Map{"iso_code": mmdbtype.String("BJ"), "names": names("Beijing", "北京市")}},
		"city":         mmdbtype.Map{"names": names("Beijing", "北京")},
	}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "city.mmdb")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := tree.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	return p
}

// redisCfg reads tags from Redis (a targeting.tags.redis body) for users
// named by X-User-Id.
func redisCfg(body string) string {
	return baseConfig + "targeting: {tags: {redis: {" + body + "}}}\n"
}

// redisTagCfg is redisCfg with the longest lookup timeout there is, so
// that a slow lookup on a busy machine does not make the tags unknown.
func redisTagCfg(body string) string { return redisCfg("timeout: 1s, " + body) }

// prepRedis starts a Redis whose user vip has the tag vip (key tags:vip).
func prepRedis(t *testing.T, fx *fixture) {
	rs := redistest.Start(t)
	fx.set("redis", rs.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	t.Cleanup(func() { rdb.Close() })
	fx.vals["redis"] = rdb
}

func rdbOf(fx *fixture) *redis.Client { return fx.vals["redis"].(*redis.Client) }

// hostOf says whose Host the upstream got.
func hostOf(e *env, path string) string {
	switch h := e.header(path, "X-Echo-Host", "Host", "client.test"); h {
	case "client.test":
		return "client"
	case "":
		return "none"
	default:
		return "upstream"
	}
}

// waitDown says whether active health marks addr down within d.
func waitDown(e *env, addr string, d time.Duration) string {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if isDown(e, addr) {
			return "down"
		}
		time.Sleep(10 * time.Millisecond)
	}
	return "up"
}

// isDown says whether active health has addr down now.
func isDown(e *env, addr string) bool {
	for _, h := range e.gw.health.Snapshot() {
		if h.Addr == addr && h.Probed && !h.ProbeHealthy {
			return true
		}
	}
	return false
}

// hostStats returns the health state of addr.
func hostStats(e *env, addr string) (ejected bool, until time.Time) {
	for _, h := range e.gw.health.Snapshot() {
		if h.Addr == addr {
			return h.Ejected, h.EjectedUntil
		}
	}
	return false, time.Time{}
}

// passiveCfg is a pool of e1 and two dead instances, each reachable alone
// through a route to a subset (/a/ and /b/), with passive health body.
func passiveCfg(body string) string {
	return baseConfig + `  echo: {instances: [{addr: "{{e1}}", metadata: {role: live}}, {addr: "{{deadA}}", metadata: {role: a}}, {addr: "{{deadB}}", metadata: {role: b}}], passive_health: {` + body + `}}
routes: [{name: a, path_prefix: /a/, upstream: "echo@role=a"}, {name: b, path_prefix: /b/, upstream: "echo@role=b"}]
`
}

func prepPassive(t *testing.T, fx *fixture) {
	newEcho(t, fx, "e1")
	fx.set("deadA", deadAddr(t))
	fx.set("deadB", deadAddr(t))
}

// deadOf is the dead instance of the phase, and the path that reaches it.
func deadOf(fx *fixture) (addr, path string) {
	if fx.phase == 0 {
		return fx.repl["deadA"], "/a/x"
	}
	return fx.repl["deadB"], "/b/x"
}

// activeCfg is a pool of e1 with active health body.
func activeCfg(body string) string {
	return echoCfg(`{instances: [{addr: "{{e1}}"}], active_health: {`+body+`}}`, "")
}

// h2Backend starts an HTTP/2 over TLS backend whose certificate is for
// up.test, signed by the CA in {{ca}}; {{otherca}} is a CA that did not.
func h2Backend(t *testing.T, fx *fixture) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "up")
	other := certstest.NewCA(t, t.TempDir(), "other")
	pair := ca.Server("up.pem", "up.key", "up.test")
	b := &echo{name: "h2", hold: make(chan struct{})}
	srv := httptest.NewUnstartedServer(b.handler())
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair.TLSCertificate(t)}}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	fx.set("h2", strings.TrimPrefix(srv.URL, "https://"))
	fx.set("ca", ca.File)
	fx.set("otherca", other.File)
}

// receiver is a webhook that records the events and whether each was signed.
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	events []string
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var b map[string]any
		_ = json.NewDecoder(req.Body).Decode(&b)
		signed := "unsigned"
		if req.Header.Get("X-Graygate-Signature") != "" {
			signed = "signed"
		}
		r.mu.Lock()
		r.events = append(r.events, fmt.Sprint(b["event"], " ", signed))
		r.mu.Unlock()
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// since returns the events received after the first n.
func (r *receiver) since(n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events[min(n, len(r.events)):])
}

func (r *receiver) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// rollbackEvents rolls every rule back and resumes, and returns the
// events the receiver got for them within wait.
func rollbackEvents(t *testing.T, e *env, r *receiver, wait time.Duration) string {
	n := r.len()
	for _, p := range []string{"/api/v1/rollback", "/api/v1/resume"} {
		if code, out := e.api("POST", p, nil); code != 200 {
			t.Fatalf("POST %s = %d %v", p, code, out)
		}
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) && !slices.ContainsFunc(r.since(n), func(ev string) bool { return strings.HasPrefix(ev, "rollback ") }) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := r.since(n); len(got) > 0 {
		return strings.Join(got, ", ")
	}
	return "none"
}

// bearer sends an admin API request with tok and returns the status.
func (e *env) bearer(tok, method, path, body string) int {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.admin+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// rawRequest writes head and body parts on a new connection to the data
// plane, pause apart, and returns the status line's code ("" on none).
func rawRequest(t *testing.T, e *env, head string, pause time.Duration, parts ...string) string {
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(e.data, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, head); err != nil {
		return "error: " + err.Error()
	}
	for i, p := range parts {
		if i > 0 {
			time.Sleep(pause)
		}
		_, _ = io.WriteString(c, p)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "error: " + err.Error()
	}
	resp.Body.Close()
	return strconv.Itoa(resp.StatusCode)
}

// keptAfterIdle sends req on a new connection, reads the answer, waits
// idle, and says whether the connection still answers req ("kept") or
// was closed.
func keptAfterIdle(t *testing.T, e *env, req string, idle time.Duration) string {
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(e.data, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	for i := range 2 {
		if i > 0 {
			time.Sleep(idle)
		}
		if _, err := io.WriteString(c, req); err != nil {
			return "closed"
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return "closed"
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Sprint(resp.StatusCode)
		}
	}
	return "kept"
}

// slowReader reads the 32 MiB answer of /big after a pause, with a small
// receive buffer, and says whether it came whole.
func slowReader(t *testing.T, e *env, pause time.Duration) string {
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", strings.TrimPrefix(e.data, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	io.WriteString(c, "GET /big HTTP/1.1\r\nHost: gw\r\n\r\n")
	time.Sleep(pause)
	n, _ := io.Copy(io.Discard, c)
	if n >= 32<<20 {
		return "whole"
	}
	return "cut"
}

// longBody is n bytes of x, produced as read.
type longBody struct{ n int64 }

func (b *longBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	k := min(int64(len(p)), b.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	b.n -= k
	return int(k), nil
}

// tlsProbe dials the TLS listener with conf (the CA of e trusted) and
// sends one request; "ok" or why not.
func tlsProbe(e *tlsEnv, conf *tls.Config) string {
	conf.RootCAs = x509.NewCertPool()
	pemData, _ := os.ReadFile(e.ca.File)
	conf.RootCAs.AppendCertsFromPEM(pemData)
	conf.ServerName = "gw.test"
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: conf}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("https://" + e.tlsAddr + "/")
	if err != nil {
		return "refused"
	}
	resp.Body.Close()
	return "ok"
}

// reloadTLS reloads e's gateway with its config changed by edit.
func reloadTLS(t *testing.T, e *tlsEnv, edit func(c *config.Config)) {
	t.Helper()
	e.gw.mu.Lock()
	cfg := *e.gw.cfg
	e.gw.mu.Unlock()
	edit(&cfg)
	if err := e.gw.ReloadConfig(context.Background(), &cfg); err != nil {
		t.Fatal(err)
	}
	if st := e.gw.Status(); st.LastResult != "ok" || len(st.RestartRequired) != 0 {
		t.Errorf("a live change reported %q, restart required %v", st.LastResult, st.RestartRequired)
	}
}

// abRule is an experiment on /shop/ whose users all go to group B unless
// held out.
const abRule = `{"type":"ab","priority":1,"experiment_id":"e","conditions":{"path_prefix":["/shop/"]},
	"groups":[{"name":"A","weight":0,"target":"a","control":true},{"name":"B","weight":100,"target":"b"}]}`

var liveCases = slices.Concat([]liveCase{
	{
		key: "preserve_host", prep: prepEcho,
		before: echoCfg("", ""), after: echoCfg("", "preserve_host: false"),
		probe:      func(t *testing.T, e *env, fx *fixture) string { return hostOf(e, "/") },
		wantBefore: "client", wantAfter: "upstream",
	},
	{
		key:    "trusted_proxies",
		before: baseConfig + "trusted_proxies: [\"10.0.0.0/8\"]\ntargeting: {region: {header: X-Region}}\n",
		after:  baseConfig + "trusted_proxies: [\"127.0.0.1/32\"]\ntargeting: {region: {header: X-Region}}\n",
		setup:  putRule("in_beijing", beijingRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return e.group("/region/x", "X-User-Id", "u1", "X-Region", "beijing")
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key:    "trust_gray_tag",
		before: baseConfig + "trusted_proxies: [\"127.0.0.1/32\"]\n", after: baseConfig + "trusted_proxies: [\"127.0.0.1/32\"]\ntrust_gray_tag: true\n",
		setup: putRule("canary", grayRule(0)),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return e.header("/", "X-Backend", "X-User-Id", "u1", "X-Gray-Tag", "gray")
		},
		wantBefore: "stable", wantAfter: "gray",
	},
	{key: "tls.min_version", run: func(t *testing.T) {
		e := startTLS(t, tlsConfig, oneCertTLS, oneCert)
		tls12 := func() string { return tlsProbe(e, &tls.Config{MaxVersion: tls.VersionTLS12}) }
		if got := tls12(); got != "ok" {
			t.Fatalf("a TLS 1.2 client before the reload: %s", got)
		}
		reloadTLS(t, e, func(c *config.Config) { c.TLS.MinVersion = "1.3" })
		if got := tls12(); got != "refused" {
			t.Errorf("a TLS 1.2 client after min_version 1.3: %s, want refused", got)
		}
	}},
	{key: "tls.client_ca_file", run: func(t *testing.T) {
		e := startTLS(t, tlsConfig, oneCertTLS, oneCert)
		if got := tlsProbe(e, &tls.Config{}); got != "ok" {
			t.Fatalf("a client without a certificate before the reload: %s", got)
		}
		reloadTLS(t, e, func(c *config.Config) { c.TLS.ClientCAFile = e.ca.File })
		if got := tlsProbe(e, &tls.Config{}); got != "refused" {
			t.Errorf("a client without a certificate after client_ca_file: %s, want refused", got)
		}
	}},
	breakerCase("breaker.enabled", "false", "true", "false"),
	breakerCase("breaker.window", "10s", "30s", "10s"),
	breakerCase("breaker.error_rate", "50", "20", "50"),
	breakerCase("breaker.p99_latency", "2s", "500ms", "2s"),
	breakerCase("breaker.min_requests", "7", "20", "7"),
	breakerCase("breaker.latency_min_requests", "300", "100", "300"),
	breakerCase("breaker.open_for", "5s", "1m0s", "5s"),
	breakerCase("breaker.half_open_probes", "9", "5", "9"),
	breakerCase("breaker.error_statuses", "[404]", "[500-599]", "[404]"),
	breakerCase("breaker.grpc_error_codes", "[UNAVAILABLE]", "[UNAVAILABLE INTERNAL DEADLINE_EXCEEDED RESOURCE_EXHAUSTED]", "[UNAVAILABLE]"),
	{key: "lifecycle.drain_delay", run: func(t *testing.T) {
		// While the gateway drains, /readyz fails and the data plane
		// still serves; without the reloaded drain_delay it would stop
		// at once.
		e := start(t, baseConfig, "")
		if err := e.reload(baseConfig + "lifecycle: {drain_delay: 5s}\n"); err != nil {
			t.Fatal(err)
		}
		e.stop()
		e.stop = nil
		waitFor(t, "/readyz to fail", 4*time.Second, func() bool {
			resp, err := e.client.Get(e.admin + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 503
		})
		if a, err := e.get("/", "X-User-Id", "1"); err != nil || a.status != 200 {
			t.Errorf("a request while draining: %+v %v, want 200", a, err)
		}
		select {
		case <-e.done:
		case <-time.After(20 * time.Second):
			t.Fatal("the gateway did not stop")
		}
	}},
	{key: "lifecycle.shutdown_timeout", run: func(t *testing.T) {
		// A request that would take 20s is cut at the reloaded
		// shutdown_timeout, not the 30s the gateway started with.
		fx := &fixture{echo: map[string]*echo{}}
		b := newEcho(t, fx, "echo")
		e := start(t, fx.fill(echoCfg("", "")), "")
		if err := e.reload(fx.fill(echoCfg("", "lifecycle: {shutdown_timeout: 500ms}"))); err != nil {
			t.Fatal(err)
		}
		go func() {
			c := &http.Client{Timeout: 60 * time.Second}
			if resp, err := c.Get(e.data + "/sleep/20s"); err == nil {
				resp.Body.Close()
			}
		}()
		waitFor(t, "the request to reach the backend", 10*time.Second, func() bool { return b.arrived.Load() > 0 })
		e.stop()
		e.stop = nil
		select {
		case <-e.done:
		case <-time.After(12 * time.Second):
			t.Fatal("the gateway still waited for the request 12s after it was told to stop (shutdown_timeout 500ms)")
		}
	}},
	{
		key:    "targeting.region.header",
		before: regionCfg("header: X-Region", ""), after: regionCfg("header: X-Area", ""),
		setup: putRule("in_beijing", beijingRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return e.group("/region/x", "X-User-Id", "u1", "X-Area", "beijing")
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key:    "targeting.region.geoip_db",
		prep:   func(t *testing.T, fx *fixture) { fx.set("geoip", geoDB(t)) },
		before: regionCfg("header: X-Region", ""), after: regionCfg("header: X-Region, geoip_db: \"{{geoip}}\"", ""),
		setup: putRule("in_beijing", beijingRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return e.group("/region/x", "X-User-Id", "u1", "X-Forwarded-For", "1.2.3.4")
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		// Display names only: matching does not depend on it.
		key:    "targeting.region.language",
		before: regionCfg("header: X-Region", ""), after: regionCfg("header: X-Region, language: en", ""),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return tgtCfg(e, func(c config.Targeting) any { return c.Region.Language })
		},
		wantBefore: `""`, wantAfter: `"en"`,
	},
	{
		key:    "targeting.region.phone_header",
		before: regionCfg("header: X-Region", ""), after: regionCfg("header: X-Region, phone_header: X-Phone", ""),
		setup: putRule("in_beijing", beijingRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return e.group("/region/x", "X-User-Id", "u1", "X-Phone", "+861012345678")
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key:    "targeting.region.default_phone_region",
		before: regionCfg("phone_header: X-Phone", ""), after: regionCfg("phone_header: X-Phone, default_phone_region: CN", ""),
		setup: putRule("in_beijing", beijingRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return e.group("/region/x", "X-User-Id", "u1", "X-Phone", "01012345678")
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		// The first source that yields a region wins.
		key:    "targeting.region.sources",
		before: regionCfg("header: X-Region, phone_header: X-Phone, sources: [header, phone]", ""),
		after:  regionCfg("header: X-Region, phone_header: X-Phone, sources: [phone, header]", ""),
		setup:  putRule("in_beijing", beijingRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return e.group("/region/x", "X-User-Id", "u1", "X-Region", "上海", "X-Phone", "+861012345678")
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key:    "targeting.region.phone_claim",
		prep:   prepSecret,
		before: baseConfig + "targeting: {region: {header: X-Region}, tags: {jwt: {hs256_secret_file: \"{{secret}}\"}}}\n",
		after:  baseConfig + "targeting: {region: {header: X-Region, phone_claim: ph}, tags: {jwt: {hs256_secret_file: \"{{secret}}\"}}}\n",
		setup:  putRule("in_beijing", beijingRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			tok := jwtTok(t, jwt.SigningMethodHS256, []byte(secretS), "", jwt.MapClaims{"sub": "u1", "ph": "+861012345678"})
			return e.group("/region/x", "Authorization", "Bearer "+tok)
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key:    "targeting.tags.header",
		before: baseConfig + "trusted_proxies: [\"127.0.0.1/32\"]\ntargeting: {tags: {header: X-User-Tags}}\n",
		after:  baseConfig + "trusted_proxies: [\"127.0.0.1/32\"]\ntargeting: {tags: {header: X-Tags}}\n",
		setup:  putRule("vips", vipTagRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return e.group("/tags/x", "X-User-Id", "u1", "X-Tags", "vip")
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key: "targeting.tags.jwt.header", prep: prepSecret,
		before: jwtCfg(`hs256_secret_file: "{{secret}}"`, ""), after: jwtCfg(`hs256_secret_file: "{{secret}}", header: X-Token`, ""),
		setup: putRule("vip", vipRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return hsGroup(t, e, secretS, jwt.MapClaims{"sub": "vip"}, "X-Token", "")
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key: "targeting.tags.jwt.cookie", prep: prepSecret,
		before: jwtCfg(`hs256_secret_file: "{{secret}}", cookie: tok_a`, ""), after: jwtCfg(`hs256_secret_file: "{{secret}}", cookie: tok_b`, ""),
		setup: putRule("vip", vipRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return hsGroup(t, e, secretS, jwt.MapClaims{"sub": "vip"}, "Cookie", "tok_b=")
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key: "targeting.tags.jwt.hs256_secret_env",
		prep: func(t *testing.T, fx *fixture) {
			t.Setenv("GG_TEST_JWT_S", secretS)
			t.Setenv("GG_TEST_JWT_T", secretT)
		},
		before: jwtCfg(`hs256_secret_env: GG_TEST_JWT_S`, ""), after: jwtCfg(`hs256_secret_env: GG_TEST_JWT_T`, ""),
		setup: putRule("vip", vipRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return hsGroup(t, e, secretT, jwt.MapClaims{"sub": "vip"})
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key: "targeting.tags.jwt.public_key_file",
		prep: func(t *testing.T, fx *fixture) {
			dir := t.TempDir()
			_, p1, _ := ecKey(t, dir, "k1")
			k2, p2, _ := ecKey(t, dir, "k2")
			fx.set("pub1", p1)
			fx.set("pub2", p2)
			fx.vals["k2"] = k2
		},
		before: jwtCfg(`public_key_file: "{{pub1}}"`, ""), after: jwtCfg(`public_key_file: "{{pub2}}"`, ""),
		setup: putRule("vip", vipRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			tok := jwtTok(t, jwt.SigningMethodES256, fx.vals["k2"], "", jwt.MapClaims{"sub": "vip"})
			return e.group("/", "Authorization", "Bearer "+tok)
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key: "targeting.tags.jwt.jwks_file",
		prep: func(t *testing.T, fx *fixture) {
			dir := t.TempDir()
			_, _, j1 := ecKey(t, dir, "k1")
			k2, _, j2 := ecKey(t, dir, "k2")
			fx.set("jwks1", j1)
			fx.set("jwks2", j2)
			fx.vals["k2"] = k2
		},
		before: jwtCfg(`jwks_file: "{{jwks1}}"`, ""), after: jwtCfg(`jwks_file: "{{jwks2}}"`, ""),
		setup: putRule("vip", vipRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			tok := jwtTok(t, jwt.SigningMethodES256, fx.vals["k2"], "k2", jwt.MapClaims{"sub": "vip"})
			return e.group("/", "Authorization", "Bearer "+tok)
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		// The key set is fetched in the background: the probe waits for
		// it to be used (and says "default" if it never is).
		key: "targeting.tags.jwt.jwks_url",
		prep: func(t *testing.T, fx *fixture) {
			for _, kid := range []string{"k1", "k2"} {
				k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
				set := jwksOf(kid, k)
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(set) }))
				t.Cleanup(srv.Close)
				fx.set("url_"+kid, srv.URL+"/jwks.json")
				fx.vals[kid] = k
			}
		},
		before: jwtCfg(`jwks_url: "{{url_k1}}"`, ""), after: jwtCfg(`jwks_url: "{{url_k2}}"`, ""),
		setup: putRule("vip", vipRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			tok := jwtTok(t, jwt.SigningMethodES256, fx.vals["k2"], "k2", jwt.MapClaims{"sub": "vip"})
			return pollGroup(e, 5*time.Second, "gray", "Authorization", "Bearer "+tok)
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key: "targeting.tags.jwt.jwks_ca_file",
		prep: func(t *testing.T, fx *fixture) {
			k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			set := jwksOf("k1", k)
			idp := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(set) }))
			t.Cleanup(idp.Close)
			dir := t.TempDir()
			good := filepath.Join(dir, "idp.pem")
			os.WriteFile(good, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: idp.Certificate().Raw}), 0o600)
			fx.set("url", idp.URL+"/jwks.json")
			fx.set("good", good)
			fx.set("other", certstest.NewCA(t, dir, "other").File)
			fx.vals["k1"] = k
		},
		before: jwtCfg(`jwks_url: "{{url}}", jwks_ca_file: "{{good}}"`, ""), after: jwtCfg(`jwks_url: "{{url}}", jwks_ca_file: "{{other}}"`, ""),
		setup: putRule("vip", vipRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			tok := jwtTok(t, jwt.SigningMethodES256, fx.vals["k1"], "k1", jwt.MapClaims{"sub": "vip"})
			return pollGroup(e, 5*time.Second, "gray", "Authorization", "Bearer "+tok)
		},
		wantBefore: "gray", wantAfter: "default",
	},
	jwksSetting("targeting.tags.jwt.jwks_timeout", "jwks_timeout: 3s", func(j jwtSection) any { return j.JWKSTimeout }, `"5s"`, `"3s"`),
	jwksSetting("targeting.tags.jwt.jwks_refresh_interval", "jwks_refresh_interval: 2m", func(j jwtSection) any { return j.JWKSRefreshInterval }, `"5m0s"`, `"2m0s"`),
	jwksSetting("targeting.tags.jwt.jwks_min_refresh_interval", "jwks_min_refresh_interval: 2s", func(j jwtSection) any { return j.JWKSMinRefreshInterval }, `"30s"`, `"2s"`),
	{
		key: "targeting.tags.jwt.issuer", prep: prepSecret,
		before: jwtCfg(`hs256_secret_file: "{{secret}}", issuer: idp-a`, ""), after: jwtCfg(`hs256_secret_file: "{{secret}}", issuer: idp-b`, ""),
		setup: putRule("vip", vipRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return hsGroup(t, e, secretS, jwt.MapClaims{"sub": "vip", "iss": "idp-b"})
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key: "targeting.tags.jwt.audience", prep: prepSecret,
		before: jwtCfg(`hs256_secret_file: "{{secret}}", audience: app-a`, ""), after: jwtCfg(`hs256_secret_file: "{{secret}}", audience: app-b`, ""),
		setup: putRule("vip", vipRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return hsGroup(t, e, secretS, jwt.MapClaims{"sub": "vip", "aud": "app-b"})
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key: "targeting.tags.jwt.identity_claim", prep: prepSecret,
		before: jwtCfg(`hs256_secret_file: "{{secret}}"`, ""), after: jwtCfg(`hs256_secret_file: "{{secret}}", identity_claim: uid`, ""),
		setup: putRule("vip", vipRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return hsGroup(t, e, secretS, jwt.MapClaims{"sub": "someone", "uid": "vip"})
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key: "targeting.tags.jwt.tags_claim", prep: prepSecret,
		before: jwtCfg(`hs256_secret_file: "{{secret}}", tags_claim: ta`, ""), after: jwtCfg(`hs256_secret_file: "{{secret}}", tags_claim: tb`, ""),
		setup: putRule("vips", vipTagRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			tok := jwtTok(t, jwt.SigningMethodHS256, []byte(secretS), "", jwt.MapClaims{"sub": "u1", "ta": map[string]any{}, "tb": map[string]any{"vip": true}})
			return e.group("/tags/x", "Authorization", "Bearer "+tok)
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		// The token's claim named by jwt.phone_claim is the phone number
		// the region comes from.
		key: "targeting.tags.jwt.phone_claim", prep: prepSecret,
		before: baseConfig + "targeting: {region: {phone_claim: pa}, tags: {jwt: {hs256_secret_file: \"{{secret}}\"}}}\n",
		after:  baseConfig + "targeting: {region: {phone_claim: pa}, tags: {jwt: {hs256_secret_file: \"{{secret}}\", phone_claim: pb}}}\n",
		setup:  putRule("in_beijing", beijingRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			tok := jwtTok(t, jwt.SigningMethodHS256, []byte(secretS), "", jwt.MapClaims{"sub": "u1", "pb": "+861012345678"})
			return e.group("/region/x", "Authorization", "Bearer "+tok)
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key: "targeting.tags.jwt.leeway", prep: prepSecret,
		before: jwtCfg(`hs256_secret_file: "{{secret}}"`, ""), after: jwtCfg(`hs256_secret_file: "{{secret}}", leeway: 2m`, ""),
		setup: putRule("vip", vipRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return hsGroup(t, e, secretS, jwt.MapClaims{"sub": "vip", "exp": time.Now().Add(-time.Minute).Unix()})
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key: "targeting.tags.redis.addr",
		prep: func(t *testing.T, fx *fixture) {
			prepRedis(t, fx)
			other := redistest.Start(t)
			fx.set("redis2", other.Addr())
			rdb := redis.NewClient(&redis.Options{Addr: other.Addr()})
			defer rdb.Close()
			if err := rdb.HSet(context.Background(), "tags:vip", "vip", "true").Err(); err != nil {
				t.Fatal(err)
			}
		},
		before: redisTagCfg(`addr: "{{redis}}"`), after: redisTagCfg(`addr: "{{redis2}}"`),
		setup: putRule("vips", vipTagRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return e.group("/tags/x", "X-User-Id", "vip")
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key:    "targeting.tags.redis.key_pattern",
		prep:   func(t *testing.T, fx *fixture) { prepRedis(t, fx); hset(t, fx, "t2:vip", "vip", "true") },
		before: redisTagCfg(`addr: "{{redis}}"`), after: redisTagCfg(`addr: "{{redis}}", key_pattern: "t2:{uid}"`),
		setup: putRule("vips", vipTagRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return e.group("/tags/x", "X-User-Id", "vip")
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key: "targeting.tags.redis.db",
		prep: func(t *testing.T, fx *fixture) {
			prepRedis(t, fx)
			rdb := redis.NewClient(&redis.Options{Addr: fx.repl["redis"], DB: 3})
			defer rdb.Close()
			if err := rdb.HSet(context.Background(), "tags:vip", "vip", "true").Err(); err != nil {
				t.Fatal(err)
			}
		},
		before: redisTagCfg(`addr: "{{redis}}"`), after: redisTagCfg(`addr: "{{redis}}", db: 3`),
		setup: putRule("vips", vipTagRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return e.group("/tags/x", "X-User-Id", "vip")
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key: "targeting.tags.redis.password_env",
		prep: func(t *testing.T, fx *fixture) {
			prepRedis(t, fx)
			hset(t, fx, "tags:vip", "vip", "true")
			if err := rdbOf(fx).ConfigSet(context.Background(), "requirepass", "right-password").Err(); err != nil {
				t.Fatal(err)
			}
			t.Setenv("GG_TEST_REDIS_WRONG", "wrong-password")
			t.Setenv("GG_TEST_REDIS_RIGHT", "right-password")
		},
		before: redisTagCfg(`addr: "{{redis}}", password_env: GG_TEST_REDIS_WRONG`), after: redisTagCfg(`addr: "{{redis}}", password_env: GG_TEST_REDIS_RIGHT`),
		setup: putRule("vips", vipTagRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return e.group("/tags/x", "X-User-Id", "vip")
		},
		wantBefore: "default", wantAfter: "gray",
	},
	redisSetting("targeting.tags.redis.timeout", "timeout: 500ms", func(r redisSection) any { return r.Timeout }, `"20ms"`, `"500ms"`),
	{
		// An answer is reused for cache_ttl: with a long one the user
		// keeps the tags Redis had at the first request.
		key: "targeting.tags.redis.cache_ttl", prep: prepRedis,
		before: redisTagCfg(`addr: "{{redis}}", cache_ttl: 1h`), after: redisTagCfg(`addr: "{{redis}}", cache_ttl: 10ms`),
		setup: putRule("vips", vipTagRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			uid := fx.fresh("cached")
			e.group("/tags/x", "X-User-Id", uid)
			hset(t, fx, "tags:"+uid, "vip", "true")
			time.Sleep(100 * time.Millisecond)
			return e.group("/tags/x", "X-User-Id", uid)
		},
		wantBefore: "default", wantAfter: "gray",
	},
	{
		// A cache of one user forgets the first when a second comes.
		key: "targeting.tags.redis.cache_size", prep: prepRedis,
		before: redisTagCfg(`addr: "{{redis}}", cache_ttl: 1h`), after: redisTagCfg(`addr: "{{redis}}", cache_ttl: 1h, cache_size: 1`),
		setup: putRule("vips", vipTagRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			uid := fx.fresh("first")
			e.group("/tags/x", "X-User-Id", uid)
			e.group("/tags/x", "X-User-Id", fx.fresh("second"))
			hset(t, fx, "tags:"+uid, "vip", "true")
			return e.group("/tags/x", "X-User-Id", uid)
		},
		wantBefore: "default", wantAfter: "gray",
	},
	redisSetting("targeting.tags.redis.breaker_failures", "breaker_failures: 9", func(r redisSection) any { return r.BreakerFailures }, `5`, `9`),
	redisSetting("targeting.tags.redis.breaker_cooldown", "breaker_cooldown: 9s", func(r redisSection) any { return r.BreakerCooldown }, `"5s"`, `"9s"`),
	{
		// Rules are checked against the declared tag types.
		key: "targeting.tag_types.*", before: baseConfig, after: baseConfig + "targeting: {tag_types: {vip: number}}\n",
		probe: func(t *testing.T, e *env, fx *fixture) string {
			code, _ := e.api("PUT", "/api/v1/rules/vips?dry_run=1", vipTagRule)
			return strconv.Itoa(code)
		},
		wantBefore: "200", wantAfter: "400",
	},
	{
		key:    "experiments.holdout.salt",
		before: baseConfig + "experiments: {holdout: {percent: 50, salt: s1}}\n", after: baseConfig + "experiments: {holdout: {percent: 50, salt: s2}}\n",
		setup: putRule("exp", abRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			for i := range 1000 {
				uid := "u" + strconv.Itoa(i)
				if bucketOf("s1", uid) >= 5000 && bucketOf("s2", uid) < 5000 {
					return e.group("/shop/x", "X-User-Id", uid)
				}
			}
			return "no such user"
		},
		wantBefore: "B", wantAfter: "holdout",
	},
	{
		// What the SRM check reads: whether a mismatch freezes the rule.
		key: "experiments.srm_action", before: baseConfig, after: baseConfig + "experiments: {srm_action: freeze}\n",
		setup: putRule("exp", abRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return fmt.Sprint(e.gw.exp.Catalog().Freeze)
		},
		wantBefore: "false", wantAfter: "true",
	},
	{
		key: "experiments.conversion_window", before: baseConfig, after: baseConfig + "experiments: {conversion_window: 1h}\n",
		setup: putRule("exp", abRule),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			code, out := e.api("GET", "/api/v1/experiments/exp/results", nil)
			return fmt.Sprint(code, " ", out["conversion_window"])
		},
		wantBefore: "200 72h0m0s", wantAfter: "200 1h0m0s",
	},
	{
		// The name a token's writes are recorded under.
		key:    "admin.tokens[].name",
		before: baseConfig + "admin: {tokens: [{name: ops, token: tok-0123456789abcdef}]}\n",
		after:  baseConfig + "admin: {tokens: [{name: deploy, token: tok-0123456789abcdef}]}\n",
		probe: func(t *testing.T, e *env, fx *fixture) string {
			body := fmt.Sprintf(`{"type":"gray","gray_percent":%d,"targets":{"gray":"gray","stable":"stable"}}`, fx.phase+1)
			if code := e.bearer("tok-0123456789abcdef", "PUT", "/api/v1/rules/k", body); code != 200 && code != 201 {
				return fmt.Sprint("PUT ", code)
			}
			_, h := e.api("GET", "/api/v1/rules/k/history", nil)
			vs, _ := h["history"].([]any)
			if len(vs) == 0 {
				return fmt.Sprint("history ", h)
			}
			last := vs[0].(map[string]any)
			for _, v := range vs {
				if v.(map[string]any)["version"].(float64) > last["version"].(float64) {
					last = v.(map[string]any)
				}
			}
			return fmt.Sprint(last["by"])
		},
		wantBefore: "ops", wantAfter: "deploy",
	},
	{
		key: "admin.tokens[].token_env",
		prep: func(t *testing.T, fx *fixture) {
			t.Setenv("GG_TEST_TOKEN_A", "alpha-0123456789abcdef")
			t.Setenv("GG_TEST_TOKEN_B", "beta-0123456789abcdef")
		},
		before: baseConfig + "admin: {tokens: [{name: ops, token_env: GG_TEST_TOKEN_A}]}\n",
		after:  baseConfig + "admin: {tokens: [{name: ops, token_env: GG_TEST_TOKEN_B}]}\n",
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return strconv.Itoa(e.bearer("beta-0123456789abcdef", "GET", "/api/v1/status", ""))
		},
		wantBefore: "401", wantAfter: "200",
	},
	{
		key:    "admin.tokens[].role",
		before: baseConfig + "admin: {tokens: [{name: ops, token: tok-0123456789abcdef, role: viewer}]}\n",
		after:  baseConfig + "admin: {tokens: [{name: ops, token: tok-0123456789abcdef, role: admin}]}\n",
		probe: func(t *testing.T, e *env, fx *fixture) string {
			body := `{"type":"gray","gray_percent":1,"targets":{"gray":"gray","stable":"stable"}}`
			return strconv.Itoa(e.bearer("tok-0123456789abcdef", "PUT", "/api/v1/rules/k?dry_run=1", body))
		},
		wantBefore: "403", wantAfter: "200",
	},
	{
		key:    "identity.sources[].cookie",
		before: baseConfig + "identity: {sources: [{cookie: uid}]}\n", after: baseConfig + "identity: {sources: [{cookie: who}]}\n",
		setup:      putRule("vip", vipRule),
		probe:      func(t *testing.T, e *env, fx *fixture) string { return e.group("/", "Cookie", "who=vip") },
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key:    "identity.sources[].query",
		before: baseConfig + "identity: {sources: [{query: uid}]}\n", after: baseConfig + "identity: {sources: [{query: who}]}\n",
		setup:      putRule("vip", vipRule),
		probe:      func(t *testing.T, e *env, fx *fixture) string { return e.group("/?who=vip") },
		wantBefore: "default", wantAfter: "gray",
	},
	{
		// A visitor without an id gets a cookie, or is known by address.
		key: "identity.anonymous", before: baseConfig, after: baseConfig + "identity: {anonymous: ip}\n",
		probe: func(t *testing.T, e *env, fx *fixture) string {
			resp, _, err := e.do("GET", "/", nil)
			if err != nil {
				return err.Error()
			}
			return fmt.Sprint(len(resp.Cookies()), " cookies")
		},
		wantBefore: "1 cookies", wantAfter: "0 cookies",
	},
	{
		key: "identity.anonymous_cookie", before: baseConfig, after: baseConfig + "identity: {anonymous_cookie: sid}\n",
		probe: func(t *testing.T, e *env, fx *fixture) string {
			resp, _, err := e.do("GET", "/", nil)
			if err != nil {
				return err.Error()
			}
			var names []string
			for _, c := range resp.Cookies() {
				names = append(names, c.Name)
			}
			return strings.Join(names, ",")
		},
		wantBefore: "gg_uid", wantAfter: "sid",
	},
	{
		// Known by address, one request a client: two addresses of one
		// /64 are two clients, then one.
		key:    "identity.ipv6_prefix",
		before: baseConfig + v6Limit(""), after: baseConfig + v6Limit(", ipv6_prefix: 64"),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			net := fmt.Sprintf("2001:db8:%x:%x::", fx.phase, fx.n.Add(1))
			e.status("GET", "/", nil, "X-Forwarded-For", net+"1")
			return e.status("GET", "/", nil, "X-Forwarded-For", net+"2")
		},
		wantBefore: "200", wantAfter: "429",
	},
	{
		key: "identity.max_length", before: baseConfig, after: baseConfig + "identity: {max_length: 512}\n",
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return e.status("GET", "/", nil, "X-User-Id", strings.Repeat("u", 300))
		},
		wantBefore: "400", wantAfter: "200",
	},
	{
		// The one connection to the backend is busy for 1.5s: a second
		// request waits that long for it, or gives up at dial_timeout.
		key: "proxy.dial_timeout", prep: prepEcho,
		before: echoCfg("", "proxy: {max_conns_per_host: 1, dial_timeout: 10s}"), after: echoCfg("", "proxy: {max_conns_per_host: 1, dial_timeout: 100ms}"),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			b := fx.echo["echo"]
			n := b.arrived.Load()
			done := make(chan struct{})
			go func() { defer close(done); e.status("GET", "/sleep/1500ms", nil) }()
			waitFor(t, "the first request to reach the backend", 10*time.Second, func() bool { return b.arrived.Load() > n })
			got := e.status("GET", "/x", nil)
			<-done
			if got != "200" {
				return "failed"
			}
			return got
		},
		wantBefore: "200", wantAfter: "failed",
	},
	{
		key: "proxy.response_header_timeout", prep: prepEcho,
		before: echoCfg("", ""), after: echoCfg("", "proxy: {response_header_timeout: 100ms}"),
		probe:      func(t *testing.T, e *env, fx *fixture) string { return e.status("GET", "/sleep/2s", nil) },
		wantBefore: "200", wantAfter: "504",
	},
	{
		// Two requests 1.5s apart share one upstream connection unless
		// it was closed for being idle.
		key: "proxy.idle_timeout", prep: prepEcho,
		before: echoCfg("", ""), after: echoCfg("", "proxy: {idle_timeout: 200ms}"),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			a := e.header("/", "X-Echo-Remote")
			time.Sleep(1500 * time.Millisecond)
			if b := e.header("/", "X-Echo-Remote"); a == b {
				return "same connection"
			}
			return "new connection"
		},
		wantBefore: "same connection", wantAfter: "new connection",
	},
	{
		// The backend pauses 1.5s in the middle of a body.
		key: "proxy.read_timeout", prep: prepEcho,
		before: echoCfg("", ""), after: echoCfg("", "proxy: {read_timeout: 200ms}"),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			resp, body, err := e.do("GET", "/stall", nil)
			if err != nil || resp.StatusCode != 200 || body != "abcdefghij" {
				return "cut"
			}
			return "whole"
		},
		wantBefore: "whole", wantAfter: "cut",
	},
	{
		// The backend reads nothing of a 64 MiB body for 2s.
		key: "proxy.write_timeout", prep: prepEcho,
		before: echoCfg("", ""), after: echoCfg("", "proxy: {write_timeout: 300ms}"),
		probe:      func(t *testing.T, e *env, fx *fixture) string { return e.postLong("/noread") },
		wantBefore: "200", wantAfter: "failed",
	},
	{
		// The client pauses 1.5s before the blank line that ends its head.
		key: "proxy.read_header_timeout", before: baseConfig, after: baseConfig + "proxy: {read_header_timeout: 300ms}\n",
		probe: func(t *testing.T, e *env, fx *fixture) string {
			if got := rawRequest(t, e, "GET / HTTP/1.1\r\nHost: gw\r\n", 1500*time.Millisecond, "X-A: 1\r\n", "\r\n"); got != "200" {
				return "cut"
			}
			return "200"
		},
		wantBefore: "200", wantAfter: "cut",
	},
	{
		// The client waits 1.5s before its second request on a connection.
		key: "proxy.client_idle_timeout", before: baseConfig, after: baseConfig + "proxy: {client_idle_timeout: 300ms}\n",
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return keptAfterIdle(t, e, "GET / HTTP/1.1\r\nHost: gw\r\n\r\n", 1500*time.Millisecond)
		},
		wantBefore: "kept", wantAfter: "closed",
	},
	{
		// The client pauses 1.5s in the middle of its body.
		key: "proxy.client_read_timeout", before: baseConfig, after: baseConfig + "proxy: {client_read_timeout: 200ms}\n",
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return rawRequest(t, e, "POST / HTTP/1.1\r\nHost: gw\r\nContent-Length: 10\r\n\r\n", 1500*time.Millisecond, "abc", "defghij")
		},
		wantBefore: "200", wantAfter: "408",
	},
	{
		// The client reads nothing of a 32 MiB answer for 2s.
		key: "proxy.client_write_timeout", prep: prepEcho,
		before: echoCfg("", ""), after: echoCfg("", "proxy: {client_write_timeout: 300ms}"),
		probe:      func(t *testing.T, e *env, fx *fixture) string { return slowReader(t, e, 2*time.Second) },
		wantBefore: "whole", wantAfter: "cut",
	},
	{
		// Two requests that wait for each other at the backend: with one
		// connection per host they never meet.
		key: "proxy.max_conns_per_host", prep: prepEcho,
		before: echoCfg("", ""), after: echoCfg("", "proxy: {max_conns_per_host: 1}"),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			b := fx.echo["echo"]
			b.peak.Store(0)
			var wg sync.WaitGroup
			for range 2 {
				wg.Add(1)
				go func() { defer wg.Done(); e.status("GET", "/pair", nil) }()
			}
			wg.Wait()
			return fmt.Sprint("peak ", b.peak.Load())
		},
		wantBefore: "peak 2", wantAfter: "peak 1",
	},
	{
		// Six client connections held open at once: with a cap of 4 the
		// last two are closed unanswered.
		key: "proxy.max_client_connections", prep: prepEcho,
		before: echoCfg("", ""), after: echoCfg("", "proxy: {max_client_connections: 4}"),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			waitClientConns(t, e, 0)
			answered, conns := dataConns(t, e, 6)
			closeAll(conns)
			return fmt.Sprint(answered, " answered")
		},
		wantBefore: "6 answered", wantAfter: "4 answered",
	},
	{
		key: "proxy.allow_underscores_in_headers", prep: prepEcho,
		before: echoCfg("", ""), after: echoCfg("", "proxy: {allow_underscores_in_headers: true}"),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return e.header("/", "X-Echo-Underscore", "X_Probe", "1")
		},
		wantBefore: "no", wantAfter: "yes",
	},
	{
		key: "proxy.via", prep: prepEcho,
		before: echoCfg("", ""), after: echoCfg("", "proxy: {via: false}"),
		probe:      func(t *testing.T, e *env, fx *fixture) string { return e.header("/", "X-Echo-Via") },
		wantBefore: "1.1 graygate", wantAfter: "",
	},
	{
		key: "upstreams.*.instances[].weight", prep: prepTwo,
		before:     echoCfg(`{instances: [{addr: "{{e1}}", weight: 1}, {addr: "{{e2}}", weight: 1}], balancer: weighted}`, ""),
		after:      echoCfg(`{instances: [{addr: "{{e1}}", weight: 1}, {addr: "{{e2}}", weight: 3}], balancer: weighted}`, ""),
		probe:      func(t *testing.T, e *env, fx *fixture) string { return e.count(4, "/", "e2") },
		wantBefore: "2", wantAfter: "3",
	},
	{
		key: "upstreams.*.balancer", prep: prepTwo,
		before:     echoCfg(`{instances: [{addr: "{{e1}}", weight: 1}, {addr: "{{e2}}", weight: 3}], balancer: round_robin}`, ""),
		after:      echoCfg(`{instances: [{addr: "{{e1}}", weight: 1}, {addr: "{{e2}}", weight: 3}], balancer: weighted}`, ""),
		probe:      func(t *testing.T, e *env, fx *fixture) string { return e.count(4, "/", "e2") },
		wantBefore: "2", wantAfter: "3",
	},
	{
		key: "upstreams.*.instances[].metadata.*", prep: prepTwo,
		before:     echoCfg(`{instances: [{addr: "{{e1}}", metadata: {version: v1}}, {addr: "{{e2}}", metadata: {version: v1}}], version_header: true}`, ""),
		after:      echoCfg(`{instances: [{addr: "{{e1}}", metadata: {version: v1}}, {addr: "{{e2}}", metadata: {version: v2}}], version_header: true}`, ""),
		probe:      func(t *testing.T, e *env, fx *fixture) string { return e.count(4, "/", "e2", "version", "v2") },
		wantBefore: "2", wantAfter: "4",
	},
	{
		key: "upstreams.*.version_header", prep: prepTwo,
		before:     echoCfg(`{instances: [{addr: "{{e1}}", metadata: {version: v1}}, {addr: "{{e2}}", metadata: {version: v2}}]}`, ""),
		after:      echoCfg(`{instances: [{addr: "{{e1}}", metadata: {version: v1}}, {addr: "{{e2}}", metadata: {version: v2}}], version_header: true}`, ""),
		probe:      func(t *testing.T, e *env, fx *fixture) string { return e.count(4, "/", "e2", "version", "v2") },
		wantBefore: "2", wantAfter: "4",
	},
	{
		key: "upstreams.*.passive_health.consecutive_failures", prep: prepPassive,
		before: passiveCfg("consecutive_failures: 3"), after: passiveCfg("consecutive_failures: 1"),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			addr, path := deadOf(fx)
			e.status("GET", path, nil)
			// The failure is reported as the request ends, which may be
			// after the client has its answer: give it time to show.
			deadline := time.Now().Add(2 * time.Second)
			ejected := false
			for !ejected && time.Now().Before(deadline) {
				ejected, _ = hostStats(e, addr)
				time.Sleep(10 * time.Millisecond)
			}
			return fmt.Sprint("ejected ", ejected)
		},
		wantBefore: "ejected false", wantAfter: "ejected true",
	},
	{
		key: "upstreams.*.passive_health.base_ejection", prep: prepPassive,
		before: passiveCfg("consecutive_failures: 1, base_ejection: 1m, max_ejection: 5h"), after: passiveCfg("consecutive_failures: 1, base_ejection: 50m, max_ejection: 5h"),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			addr, path := deadOf(fx)
			t0 := time.Now()
			e.status("GET", path, nil)
			// The failure is reported as the request ends, which may be
			// after the client has its answer.
			waitFor(t, "the ejection", 10*time.Second, func() bool { ej, _ := hostStats(e, addr); return ej })
			if _, until := hostStats(e, addr); until.Sub(t0) > 30*time.Minute {
				return "over 30m"
			}
			return "under 30m"
		},
		wantBefore: "under 30m", wantAfter: "over 30m",
	},
	{
		// The second ejection of an instance doubles the first, up to
		// max_ejection.
		key: "upstreams.*.passive_health.max_ejection", prep: prepPassive,
		before: passiveCfg("consecutive_failures: 1, base_ejection: 1s, max_ejection: 1s"), after: passiveCfg("consecutive_failures: 1, base_ejection: 1s, max_ejection: 1h"),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			addr, path := deadOf(fx)
			e.status("GET", path, nil)
			waitFor(t, "the first ejection to end", 10*time.Second, func() bool { ej, _ := hostStats(e, addr); return !ej })
			t0 := time.Now()
			e.status("GET", path, nil)
			waitFor(t, "the second ejection", 10*time.Second, func() bool { ej, _ := hostStats(e, addr); return ej })
			if _, until := hostStats(e, addr); until.Sub(t0) >= 1900*time.Millisecond {
				return "doubled"
			}
			return "capped"
		},
		wantBefore: "capped", wantAfter: "doubled",
	},
	{
		key: "upstreams.*.active_health.path", prep: prepTwo,
		before: activeCfg("path: /healthz, interval: 50ms, unhealthy_threshold: 1"), after: activeCfg("path: /bad, interval: 50ms, unhealthy_threshold: 1"),
		probe:      func(t *testing.T, e *env, fx *fixture) string { return waitDown(e, fx.repl["e1"], 2*time.Second) },
		wantBefore: "up", wantAfter: "down",
	},
	{
		key: "upstreams.*.active_health.interval", prep: prepTwo,
		before: activeCfg("interval: 1h"), after: activeCfg("interval: 50ms"),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			b := fx.echo["e1"]
			n := b.probes.Load()
			time.Sleep(time.Second)
			if b.probes.Load()-n >= 3 {
				return "frequent"
			}
			return "rare"
		},
		wantBefore: "rare", wantAfter: "frequent",
	},
	{
		// Each probe takes 1s.
		key: "upstreams.*.active_health.timeout", prep: prepTwo,
		before:     activeCfg("path: /slowhealth, timeout: 5s, interval: 100ms, unhealthy_threshold: 1"),
		after:      activeCfg("path: /slowhealth, timeout: 50ms, interval: 100ms, unhealthy_threshold: 1"),
		probe:      func(t *testing.T, e *env, fx *fixture) string { return waitDown(e, fx.repl["e1"], 3*time.Second) },
		wantBefore: "up", wantAfter: "down",
	},
	{
		key: "upstreams.*.active_health.unhealthy_threshold", prep: prepTwo,
		before: activeCfg("path: /bad, interval: 100ms, unhealthy_threshold: 100"), after: activeCfg("path: /bad, interval: 100ms, unhealthy_threshold: 1"),
		probe:      func(t *testing.T, e *env, fx *fixture) string { return waitDown(e, fx.repl["e1"], 2*time.Second) },
		wantBefore: "up", wantAfter: "down",
	},
	{
		// Down, then healthy again: back after healthy_threshold probes.
		key: "upstreams.*.active_health.healthy_threshold", prep: prepTwo,
		before: activeCfg("path: /toggle, interval: 100ms, unhealthy_threshold: 1, healthy_threshold: 100"),
		after:  activeCfg("path: /toggle, interval: 100ms, unhealthy_threshold: 1, healthy_threshold: 1"),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			b := fx.echo["e1"]
			b.bad.Store(true)
			if got := waitDown(e, fx.repl["e1"], 10*time.Second); got != "down" {
				return "never down"
			}
			b.bad.Store(false)
			deadline := time.Now().Add(2 * time.Second)
			for time.Now().Before(deadline) {
				if !isDown(e, fx.repl["e1"]) {
					return "back"
				}
				time.Sleep(10 * time.Millisecond)
			}
			return "still down"
		},
		wantBefore: "still down", wantAfter: "back",
	},
	{
		key: "upstreams.*.max_concurrent", prep: prepEcho,
		before: echoCfg("", ""), after: echoCfg(`{instances: [{addr: "{{echo}}"}], max_concurrent: 1}`, ""),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			b := fx.echo["echo"]
			n := b.arrived.Load()
			done := make(chan struct{})
			go func() { defer close(done); e.status("GET", "/hold", nil) }()
			waitFor(t, "the held request to reach the backend", 10*time.Second, func() bool { return b.arrived.Load() > n })
			got := e.status("GET", "/x", nil)
			b.release()
			<-done
			return got
		},
		wantBefore: "200", wantAfter: "503",
	},
	{
		key: "upstreams.*.protocol", prep: prepEcho,
		before: echoCfg("", ""), after: echoCfg(`{instances: [{addr: "{{echo}}"}], protocol: h2c}`, ""),
		probe:      func(t *testing.T, e *env, fx *fixture) string { return e.header("/", "X-Echo-Proto") },
		wantBefore: "HTTP/1.1", wantAfter: "HTTP/2.0",
	},
	{
		key: "upstreams.*.ca_file", prep: h2Backend,
		before:     echoCfg(`{instances: [{addr: "{{h2}}"}], protocol: h2, server_name: up.test, ca_file: "{{ca}}"}`, ""),
		after:      echoCfg(`{instances: [{addr: "{{h2}}"}], protocol: h2, server_name: up.test, ca_file: "{{otherca}}"}`, ""),
		probe:      func(t *testing.T, e *env, fx *fixture) string { return e.status("GET", "/", nil) },
		wantBefore: "200", wantAfter: "502",
	},
	{
		key: "upstreams.*.server_name", prep: h2Backend,
		before:     echoCfg(`{instances: [{addr: "{{h2}}"}], protocol: h2, server_name: up.test, ca_file: "{{ca}}"}`, ""),
		after:      echoCfg(`{instances: [{addr: "{{h2}}"}], protocol: h2, server_name: other.test, ca_file: "{{ca}}"}`, ""),
		probe:      func(t *testing.T, e *env, fx *fixture) string { return e.status("GET", "/", nil) },
		wantBefore: "200", wantAfter: "502",
	},
	{
		// A rule bound to route r2 follows the name to its new path.
		key:    "routes[].name",
		before: baseConfig + "routes: [{name: r1, path_prefix: /one/, upstream: a}, {name: r2, path_prefix: /two/, upstream: a}]\n",
		after:  baseConfig + "routes: [{name: r2, path_prefix: /one/, upstream: a}, {name: r1, path_prefix: /two/, upstream: a}]\n",
		setup: putRule("bound", map[string]any{"type": "gray", "gray_percent": 100, "route": "r2",
			"targets": map[string]string{"gray": "gray", "stable": "stable"}}),
		probe:      func(t *testing.T, e *env, fx *fixture) string { return e.group("/one/x", "X-User-Id", "u1") },
		wantBefore: "default", wantAfter: "gray",
	},
	{
		key:    "routes[].host",
		before: baseConfig + "routes: [{name: r, host: h1.test, upstream: a}]\n", after: baseConfig + "routes: [{name: r, host: h2.test, upstream: a}]\n",
		probe:      func(t *testing.T, e *env, fx *fixture) string { return e.header("/", "X-Backend", "Host", "h2.test") },
		wantBefore: "stable", wantAfter: "a",
	},
	{
		key:    "routes[].path_prefix",
		before: baseConfig + "routes: [{name: r, path_prefix: /api/, upstream: a}]\n", after: baseConfig + "routes: [{name: r, path_prefix: /v2/, upstream: a}]\n",
		probe:      func(t *testing.T, e *env, fx *fixture) string { return e.header("/v2/x", "X-Backend") },
		wantBefore: "stable", wantAfter: "a",
	},
	{
		key:    "routes[].upstream",
		before: baseConfig + "routes: [{name: r, path_prefix: /api/, upstream: a}]\n", after: baseConfig + "routes: [{name: r, path_prefix: /api/, upstream: b}]\n",
		probe:      func(t *testing.T, e *env, fx *fixture) string { return e.header("/api/x", "X-Backend") },
		wantBefore: "a", wantAfter: "b",
	},
	{
		key: "routes[].preserve_host", prep: prepEcho,
		before:     echoCfg("", "routes: [{name: r, path_prefix: /r/, upstream: echo}]"),
		after:      echoCfg("", "routes: [{name: r, path_prefix: /r/, upstream: echo, preserve_host: false}]"),
		probe:      func(t *testing.T, e *env, fx *fixture) string { return hostOf(e, "/r/x") },
		wantBefore: "client", wantAfter: "upstream",
	},
	{
		key: "routes[].version_header", prep: prepTwo,
		before:     baseConfig + `  ver: {instances: [{addr: "{{e1}}", metadata: {version: v1}}, {addr: "{{e2}}", metadata: {version: v2}}]}` + "\nroutes: [{name: r, path_prefix: /, upstream: ver}]\n",
		after:      baseConfig + `  ver: {instances: [{addr: "{{e1}}", metadata: {version: v1}}, {addr: "{{e2}}", metadata: {version: v2}}]}` + "\nroutes: [{name: r, path_prefix: /, upstream: ver, version_header: true}]\n",
		probe:      func(t *testing.T, e *env, fx *fixture) string { return e.count(4, "/", "e2", "version", "v2") },
		wantBefore: "2", wantAfter: "4",
	},
	{
		key: "routes[].max_body_bytes", prep: prepEcho,
		before: echoCfg("", "routes: [{name: r, path_prefix: /r/, upstream: echo}]"),
		after:  echoCfg("", "routes: [{name: r, path_prefix: /r/, upstream: echo, max_body_bytes: 10}]"),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return e.status("POST", "/r/x", strings.NewReader(strings.Repeat("x", 100)))
		},
		wantBefore: "200", wantAfter: "413",
	},
	{
		key:    "notifications[].events",
		prep:   func(t *testing.T, fx *fixture) { r := newReceiver(t); fx.vals["r"] = r; fx.set("hook", r.srv.URL) },
		before: baseConfig + `notifications: [{name: ops, url: "{{hook}}", events: [breaker_open]}]` + "\n",
		after:  baseConfig + `notifications: [{name: ops, url: "{{hook}}", events: [rollback]}]` + "\n",
		setup:  putRule("canary", grayRule(10)),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return rollbackEvents(t, e, fx.vals["r"].(*receiver), []time.Duration{time.Second, 20 * time.Second}[fx.phase])
		},
		wantBefore: "none", wantAfter: "rollback unsigned",
	},
	{
		key: "notifications[].secret_env",
		prep: func(t *testing.T, fx *fixture) {
			r := newReceiver(t)
			fx.vals["r"] = r
			fx.set("hook", r.srv.URL)
			t.Setenv("GG_TEST_HOOK_SECRET", "hook-secret")
		},
		before: baseConfig + `notifications: [{name: ops, url: "{{hook}}", events: [rollback]}]` + "\n",
		after:  baseConfig + `notifications: [{name: ops, url: "{{hook}}", events: [rollback], secret_env: GG_TEST_HOOK_SECRET}]` + "\n",
		setup:  putRule("canary", grayRule(10)),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return rollbackEvents(t, e, fx.vals["r"].(*receiver), 20*time.Second)
		},
		wantBefore: "rollback unsigned", wantAfter: "rollback signed",
	},
},
	limitCases("limits.", func(l string) string { return "limits: {" + l + "}" }, "/"),
	limitCases("routes[].", func(l string) string {
		if l != "" {
			l = ", " + l
		}
		return "routes: [{name: r, path_prefix: /" + l + "}]"
	}, "/"),
)

// pollGroup asks until the group is want, for up to d, and returns the last.
func pollGroup(e *env, d time.Duration, want string, hdr ...string) string {
	deadline := time.Now().Add(d)
	for {
		got := e.group("/", hdr...)
		if got == want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func hset(t *testing.T, fx *fixture, key, field, value string) {
	if err := rdbOf(fx).HSet(context.Background(), key, field, value).Err(); err != nil {
		t.Fatal(err)
	}
}

type (
	jwtSection   = struct{ JWKSTimeout, JWKSRefreshInterval, JWKSMinRefreshInterval any }
	redisSection = struct{ Timeout, BreakerFailures, BreakerCooldown any }
)

// jwksSetting is a jwks_url setting the serving key set was built with
// (the fetch timing it sets shows in no single request).
func jwksSetting(key, setting string, pick func(jwtSection) any, before, after string) liveCase {
	url := "http://127.0.0.1:1/jwks.json"
	base := fmt.Sprintf(`jwks_url: %q, jwks_timeout: 5s, jwks_refresh_interval: 5m, jwks_min_refresh_interval: 30s`, url)
	field := setting[:strings.Index(setting, ":")]
	next := strings.Replace(base, writtenField(base, field), setting, 1)
	return liveCase{
		key: key, before: jwtCfg(base, ""), after: jwtCfg(next, ""),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return tgtCfg(e, func(c config.Targeting) any {
				j := c.Tags.JWT
				return pick(jwtSection{j.JWKSTimeout, j.JWKSRefreshInterval, j.JWKSMinRefreshInterval})
			})
		},
		wantBefore: before, wantAfter: after,
	}
}

// writtenField returns "field: value" as written in body.
func writtenField(body, field string) string {
	i := strings.Index(body, field+":")
	j := strings.Index(body[i:], ",")
	if j < 0 {
		return body[i:]
	}
	return body[i : i+j]
}

// redisSetting is a Redis setting the serving tag store was built with
// (how it bounds a slow or failing Redis shows in no single request).
func redisSetting(key, setting string, pick func(redisSection) any, before, after string) liveCase {
	return liveCase{
		key: key, prep: prepRedis,
		before: redisCfg(`addr: "{{redis}}"`), after: redisCfg(`addr: "{{redis}}", ` + setting),
		probe: func(t *testing.T, e *env, fx *fixture) string {
			return tgtCfg(e, func(c config.Targeting) any {
				r := c.Tags.Redis
				return pick(redisSection{r.Timeout, r.BreakerFailures, r.BreakerCooldown})
			})
		},
		wantBefore: before, wantAfter: after,
	}
}

// postLong POSTs a 64 MiB body to path and says "200", or "failed" for
// any other answer or none (an upstream write that timed out).
func (e *env) postLong(path string) string {
	req, _ := http.NewRequest("POST", e.data+path, &longBody{n: 64 << 20})
	req.ContentLength = 64 << 20
	resp, err := e.client.Do(req)
	if err != nil {
		return "failed"
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return "failed"
	}
	return "200"
}
