package main

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/valyala/fasthttp"
)

// BodySize is the size of every upstream response body, as in the issue.
const BodySize = 100

// body returns a BodySize-byte body that starts with the upstream's name, so
// the split checker can tell which pool answered whatever the proxy's headers.
func body(name string) []byte {
	b := bytes.Repeat([]byte{'.'}, BodySize)
	copy(b, name+"\n")
	b[BodySize-1] = '\n'
	return b
}

// serve runs one fasthttp server on two listeners (stable and gray) until
// SIGINT or SIGTERM.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	stable := fs.String("stable", "127.0.0.1:19001", "stable `ADDR`")
	gray := fs.String("gray", "127.0.0.1:19002", "gray `ADDR`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	errc := make(chan error, 2)
	for _, l := range []struct{ name, addr string }{{"stable", *stable}, {"gray", *gray}} {
		ln, err := net.Listen("tcp4", l.addr)
		if err != nil {
			return fmt.Errorf("listen %s: %w", l.addr, err)
		}
		b := body(l.name)
		srv := &fasthttp.Server{
			Name:                          "benchup",
			NoDefaultDate:                 true,
			NoDefaultContentType:          true,
			DisableHeaderNamesNormalizing: true,
			ReadBufferSize:                8192,
			Handler: func(ctx *fasthttp.RequestCtx) {
				if string(ctx.Path()) == "/v1/traces" {
					// graygate-trace exports its spans here: an empty
					// ExportTraceServiceResponse (OTLP/HTTP) is zero bytes.
					ctx.Response.Header.SetContentTypeBytes(protobuf)
					return
				}
				ctx.Response.Header.SetContentTypeBytes(textPlain)
				ctx.Response.SetBodyRaw(b)
			},
		}
		go func() { errc <- srv.Serve(ln) }()
	}
	return untilSignal(errc, nil)
}

// untilSignal waits for SIGINT or SIGTERM, then runs stop (if set), or for
// a server's error on errc.
func untilSignal(errc <-chan error, stop func() error) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-sig:
		if stop != nil {
			return stop()
		}
		return nil
	case err := <-errc:
		return err
	}
}

var textPlain, protobuf = []byte("text/plain"), []byte("application/x-protobuf")
