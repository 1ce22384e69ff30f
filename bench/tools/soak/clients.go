package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// upstream starts one version of the service: an HTTP/1.1 and h2c server
// whose paths each take one shape an upstream can have.
func upstream(name string) string {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) })
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "262144")
		w.Write(make([]byte, 262144))
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-T")
		for range 5 {
			io.WriteString(w, strings.Repeat("s", 1000))
			w.(http.Flusher).Flush()
			time.Sleep(time.Millisecond)
		}
		w.Header().Set("X-T", "done")
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Duration(mrand.IntN(300)) * time.Millisecond)
		io.WriteString(w, name)
	})
	mux.HandleFunc("/stall", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		io.WriteString(w, "part")
		w.(http.Flusher).Flush()
		time.Sleep(3 * time.Second) // past graygate's read_timeout of 1 s
	})
	mux.HandleFunc("/cut", func(w http.ResponseWriter, r *http.Request) {
		c, bw, _ := w.(http.Hijacker).Hijack()
		bw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nshort")
		bw.Flush()
		c.Close()
	})
	mux.HandleFunc("/hint", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		io.WriteString(w, name)
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "want a WebSocket upgrade", http.StatusBadRequest)
			return
		}
		c, bw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		fmt.Fprintf(bw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
			base64.StdEncoding.EncodeToString(sum[:]))
		bw.Flush()
		io.Copy(c, bw) // the tunnel's bytes come back as they are
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err == nil {
			w.Write(b)
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := &http.Server{Handler: http.StripPrefix("/svc", mux), Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go srv.Serve(ln)
	return ln.Addr().String()
}

var paths = []string{"/ok", "/ok", "/ok", "/big", "/stream", "/slow", "/stall", "/cut", "/hint", "/echo"}

// wantStatus is what each path must get through graygate: an upstream
// body that stalls is a 504, one cut short a 502, the rest 200.
func wantStatus(path string) int {
	switch path {
	case "/stall":
		return http.StatusGatewayTimeout
	case "/cut":
		return http.StatusBadGateway
	}
	return http.StatusOK
}

type clients struct{ h1, h2c, tls1, tls2 *http.Client }

func newClients(pool *x509.CertPool) *clients {
	transport := func(tc *tls.Config, set func(*http.Protocols)) *http.Client {
		tr := &http.Transport{TLSClientConfig: tc, MaxIdleConnsPerHost: 16, DisableCompression: true, Protocols: new(http.Protocols)}
		set(tr.Protocols)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	return &clients{
		h1:   transport(nil, func(p *http.Protocols) { p.SetHTTP1(true) }),
		h2c:  transport(nil, func(p *http.Protocols) { p.SetUnencryptedHTTP2(true) }),
		tls1: transport(&tls.Config{RootCAs: pool}, func(p *http.Protocols) { p.SetHTTP1(true) }),
		tls2: transport(&tls.Config{RootCAs: pool}, func(p *http.Protocols) { p.SetHTTP2(true) }),
	}
}

func (c *clients) closeIdle() {
	for _, cl := range []*http.Client{c.h1, c.h2c, c.tls1, c.tls2} {
		cl.CloseIdleConnections()
	}
}

// good sends requests one after another on a client's pooled connections
// and checks each answer's status, body and protocol.
func good(ctx context.Context, c *http.Client, proto, base string, id int, t *tally) {
	r := mrand.New(mrand.NewPCG(*seed, uint64(id)))
	for ctx.Err() == nil {
		p := paths[r.IntN(len(paths))]
		method, body := "GET", ""
		if p == "/echo" {
			method, body = "POST", strings.Repeat("e", r.IntN(40000))
		}
		req, _ := http.NewRequestWithContext(ctx, method, base+"/svc"+p, strings.NewReader(body))
		req.Header.Set("X-User-Id", strconv.Itoa(r.IntN(100000)))
		resp, err := c.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				t.fail(proto + " " + p + " error " + short(err))
			}
			continue
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil && ctx.Err() != nil {
			continue
		}
		k := fmt.Sprintf("%s %s %d", proto, p, resp.StatusCode)
		switch {
		case resp.StatusCode != wantStatus(p):
			t.fail(k)
		case err != nil && resp.StatusCode == http.StatusOK:
			t.fail(k + " body error " + short(err))
		case p == "/echo" && string(got) != body:
			t.fail(k + " echo differs")
		case (resp.ProtoMajor == 2) != (proto == "h2c" || proto == "tls-h2"):
			t.fail(k + " over " + resp.Proto)
		default:
			t.add(k)
		}
	}
}

// dial connects a raw client to port, with a deadline 5 s away; nil (the
// failure counted, after a 10 ms pause) when it cannot.
func dial(port int, what string, t *tally) net.Conn {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
	if err != nil {
		t.fail(what + " dial: " + short(err))
		time.Sleep(10 * time.Millisecond)
		return nil
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	return c
}

var abuses = []string{"partial-head", "close-before-read", "pipeline", "pipeline-mixed", "slow-chunked-reset", "half-close", "idle", "garbage", "big-upload-abort"}

// request is a GET of a /svc path in raw HTTP/1.1.
func request(r *mrand.Rand, p string) string {
	return "GET /svc" + p + " HTTP/1.1\r\nHost: a\r\nX-User-Id: " + strconv.Itoa(r.IntN(1000)) + "\r\n\r\n"
}

// readPipelined reads n answers (skipping interim ones) and checks each
// is the status its path calls for.
func readPipelined(br *bufio.Reader, seq []string, what string, t *tally) {
	for i, p := range seq {
		resp, err := http.ReadResponse(br, nil)
		for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 {
			resp, err = http.ReadResponse(br, nil)
		}
		if err != nil {
			t.fail(fmt.Sprintf("%s: answer %d of %v: %s", what, i+1, seq, short(err)))
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != wantStatus(p) {
			t.fail(fmt.Sprintf("%s: answer %d of %v: %d", what, i+1, seq, resp.StatusCode))
			return
		}
	}
	t.add(what + " answered whole")
}

// abuser opens a raw connection at a time and does one thing a careless
// or hostile client does.
func abuser(ctx context.Context, id int, t *tally) {
	r := mrand.New(mrand.NewPCG(*seed, uint64(1000+id)))
	for ctx.Err() == nil {
		a := abuses[r.IntN(len(abuses))]
		c := dial(dataPort, "abuse", t)
		if c == nil {
			continue
		}
		br := bufio.NewReader(c)
		switch a {
		case "partial-head":
			io.WriteString(c, "GET /svc/ok HTTP/1.1\r\nHost: a\r\nX-Us")
			time.Sleep(time.Duration(r.IntN(50)) * time.Millisecond)
		case "close-before-read":
			io.WriteString(c, request(r, paths[r.IntN(len(paths))]))
			time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
			if r.IntN(2) == 0 {
				c.(*net.TCPConn).SetLinger(0)
			}
		case "pipeline", "pipeline-mixed":
			var seq []string
			var b strings.Builder
			for range 3 {
				p := "/ok"
				if a == "pipeline-mixed" {
					p = []string{"/ok", "/big", "/stream", "/hint", "/slow"}[r.IntN(5)]
				}
				seq = append(seq, p)
				b.WriteString(request(r, p))
			}
			io.WriteString(c, b.String())
			readPipelined(br, seq, "abuse "+a, t)
		case "slow-chunked-reset":
			io.WriteString(c, "POST /svc/echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
			time.Sleep(time.Duration(r.IntN(100)) * time.Millisecond)
			c.(*net.TCPConn).SetLinger(0)
		case "half-close":
			io.WriteString(c, request(r, "/ok"))
			c.(*net.TCPConn).CloseWrite()
			readPipelined(br, []string{"/ok"}, "abuse half-close", t)
		case "idle":
			time.Sleep(time.Duration(r.IntN(500)) * time.Millisecond)
		case "garbage":
			b := make([]byte, 1+r.IntN(300))
			rand.Read(b)
			c.Write(b)
			io.Copy(io.Discard, br)
		case "big-upload-abort":
			io.WriteString(c, "POST /svc/echo HTTP/1.1\r\nHost: a\r\nContent-Length: 1000000\r\n\r\n")
			c.Write(make([]byte, r.IntN(200000)))
			c.(*net.TCPConn).SetLinger(0)
		}
		c.Close()
	}
}

var tlsAbuses = []string{"partial-hello", "garbage", "pipeline", "reset-mid-upload", "idle-after-handshake", "half-close"}

// tlsAbuser is abuser for the TLS listener.
func tlsAbuser(ctx context.Context, id int, pool *x509.CertPool, t *tally) {
	r := mrand.New(mrand.NewPCG(*seed, uint64(2000+id)))
	for ctx.Err() == nil {
		a := tlsAbuses[r.IntN(len(tlsAbuses))]
		raw := dial(tlsPort, "tls abuse", t)
		if raw == nil {
			continue
		}
		switch a {
		case "partial-hello":
			raw.Write([]byte{0x16, 0x03, 0x01, 0x01, 0x00, 0x01})
			time.Sleep(time.Duration(r.IntN(50)) * time.Millisecond)
			raw.Close()
			continue
		case "garbage":
			b := make([]byte, 1+r.IntN(300))
			rand.Read(b)
			raw.Write(b)
			io.Copy(io.Discard, raw)
			raw.Close()
			continue
		}
		c := tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}})
		if err := c.Handshake(); err != nil {
			t.fail("tls abuse handshake: " + short(err))
			raw.Close()
			continue
		}
		br := bufio.NewReader(c)
		switch a {
		case "pipeline":
			var seq []string
			var b strings.Builder
			for range 3 {
				p := []string{"/ok", "/big", "/stream", "/hint", "/slow"}[r.IntN(5)]
				seq = append(seq, p)
				b.WriteString(request(r, p))
			}
			io.WriteString(c, b.String())
			readPipelined(br, seq, "tls abuse pipeline", t)
		case "reset-mid-upload":
			io.WriteString(c, "POST /svc/echo HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n")
			c.Write(make([]byte, r.IntN(50000)))
			raw.(*net.TCPConn).SetLinger(0)
		case "idle-after-handshake":
			time.Sleep(time.Duration(r.IntN(300)) * time.Millisecond)
		case "half-close":
			io.WriteString(c, request(r, "/ok"))
			c.CloseWrite()
			readPipelined(br, []string{"/ok"}, "tls abuse half-close", t)
		}
		c.Close()
	}
}

// tunnel opens a WebSocket through graygate (over TLS when pool is not
// nil) and sends bytes through it for up to 2 s, while the operator
// changes rules and reloads: every byte must come back, in order.
func tunnel(ctx context.Context, pool *x509.CertPool, id int, t *tally) {
	r := mrand.New(mrand.NewPCG(*seed, uint64(3000+id)))
	what, port := "websocket", dataPort
	if pool != nil {
		what, port = "tls websocket", tlsPort
	}
	for ctx.Err() == nil {
		c := dial(port, what, t)
		if c == nil {
			continue
		}
		if pool != nil {
			c = tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}})
		}
		c.SetDeadline(time.Now().Add(8 * time.Second))
		key := make([]byte, 16)
		rand.Read(key)
		fmt.Fprintf(c, "GET /svc/ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\nX-User-Id: %d\r\n\r\n",
			base64.StdEncoding.EncodeToString(key), r.IntN(100000))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		switch {
		case err != nil:
			t.fail(what + " handshake: " + short(err))
		case resp.StatusCode != http.StatusSwitchingProtocols:
			t.fail(fmt.Sprintf("%s handshake: %d", what, resp.StatusCode))
		default:
			until := time.Now().Add(time.Duration(200+r.IntN(1800)) * time.Millisecond)
			ok := true
			for ok && time.Now().Before(until) && ctx.Err() == nil {
				msg := make([]byte, 1+r.IntN(8000))
				rand.Read(msg)
				if _, err := c.Write(msg); err != nil {
					t.fail(what + " write: " + short(err))
					ok = false
					break
				}
				got := make([]byte, len(msg))
				if _, err := io.ReadFull(br, got); err != nil {
					t.fail(what + " read: " + short(err))
					ok = false
				} else if string(got) != string(msg) {
					t.fail(what + ": the bytes came back changed")
					ok = false
				}
				time.Sleep(time.Duration(r.IntN(50)) * time.Millisecond)
			}
			if ok {
				t.add(what + " tunnel kept every byte")
			}
		}
		c.Close()
	}
}
