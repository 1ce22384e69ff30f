//go:build !(linux || darwin || freebsd)

package proxy

import "github.com/valyala/fasthttp"

// watchUpstream is unavailable on this platform: an upstream that closes
// while a client's upload is paused is noticed when the client sends more.
func (ex *exchange) watchUpstream(*fasthttp.RequestCtx, *upstreamTCP) bool { return false }

func (ex *exchange) unwatchUpstream(*fasthttp.RequestCtx, *upstreamTCP, bool) {}

func (ex *exchange) upPeek(uintptr) bool { return true }
