package main

import (
	"flag"
	"fmt"
	"hash/crc32"
	"net"

	"github.com/valyala/fasthttp"
)

// minproxy is the "minimal Go fasthttp proxy": the same 10% split by
// X-User-Id (crc32 mod 100) as nginx's split_clients, forwarded with
// fasthttp.HostClient.Do, with nothing else: no validation, no access log,
// no metrics, no timeouts. It is the floor a fasthttp-based gateway stands
// on; graygate's distance from it is the cost of graygate's features.
func minproxy(args []string) error {
	fs := flag.NewFlagSet("minproxy", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:18080", "listen `ADDR`")
	stable := fs.String("stable", "127.0.0.1:19001", "stable `ADDR`")
	gray := fs.String("gray", "127.0.0.1:19002", "gray `ADDR`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp4", *listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", *listen, err)
	}
	clients := [2]*fasthttp.HostClient{
		{Addr: *stable, NoDefaultUserAgentHeader: true, DisablePathNormalizing: true},
		{Addr: *gray, NoDefaultUserAgentHeader: true, DisablePathNormalizing: true},
	}
	groups := [2]string{"stable", "gray"}
	srv := &fasthttp.Server{
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		Handler: func(ctx *fasthttp.RequestCtx) {
			i := 0
			if crc32.ChecksumIEEE(ctx.Request.Header.Peek("X-User-Id"))%100 < 10 {
				i = 1
			}
			if err := clients[i].Do(&ctx.Request, &ctx.Response); err != nil {
				ctx.Error("bad gateway", fasthttp.StatusBadGateway)
				return
			}
			ctx.Response.Header.Set("X-Gray-Group", groups[i])
		},
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	return untilSignal(errc, srv.Shutdown)
}
