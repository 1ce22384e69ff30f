//go:build !(linux || darwin || freebsd)

package proxy

import (
	"net"

	"github.com/valyala/fasthttp"
)

// watch is unavailable on this platform: a client that hangs up is noticed
// only when its response is written.
func (ex *exchange) watch(*fasthttp.RequestCtx, net.Conn) bool { return false }

func (ex *exchange) unwatch(*fasthttp.RequestCtx) {}

func (ex *exchange) peek(uintptr) bool { return true }
