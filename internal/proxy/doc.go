// Package proxy is the gateway's fasthttp data plane: it validates a
// request, asks the router where it goes, forwards it to one instance of the
// chosen pool with the gateway's headers, and streams the answer back.
//
// # What a proxy must guarantee, rebuilt on fasthttp
//
// net/http/httputil.ReverseProxy is the reference for the guarantees below;
// fasthttp gives none of them for free, so each is done here on purpose and
// tested:
//
//   - Hop-by-hop headers (Connection, Proxy-Connection, Keep-Alive,
//     Proxy-Authenticate, Proxy-Authorization, Te, Trailer,
//     Transfer-Encoding, Upgrade, and every header named in Connection) are
//     removed in both directions, before the gateway adds its own headers,
//     so "Connection: X-Forwarded-For" cannot strip what the gateway sets.
//   - Inbound X-Forwarded-For/-Proto/-Host (and Forwarded, X-Real-Ip) are
//     dropped unless the TCP peer is in Options.TrustedProxies. X-Gray-Tag is
//     always replaced by the router's decision.
//   - WebSocket handshakes get Upgrade and Connection re-added and become a
//     byte tunnel after the 101.
//   - text/event-stream and bodies of unknown length are flushed chunk by
//     chunk.
//   - One error mapping (classify): client gone → 499, no instance → 503,
//     timeout → 504, other transport failure → 502.
//
// # Request smuggling: what fasthttp v1.78.0 rejects, and what we add
//
// fasthttp's request parser already refuses, with 400 (431 for a header
// larger than its read buffer): a duplicate Content-Length; a Content-Length
// that is not all digits; a Transfer-Encoding other than chunked or
// identity, or given twice; Transfer-Encoding in HTTP/1.0; whitespace
// between a field name and its colon; a header block starting with
// whitespace; invalid bytes in names or values (CR, LF, NUL, other CTLs);
// a missing (HTTP/1.1) or duplicate Host; and an invalid request target. It accepts, and this
// package rejects with 400 (checkHeaderBlock, run on the raw header bytes,
// which fasthttp keeps as they came off the wire):
//
//   - Content-Length together with Transfer-Encoding (fasthttp lets chunked
//     win and closes the connection afterwards);
//   - Transfer-Encoding: identity (fasthttp ignores it and reads no body,
//     leaving the body to be parsed as the next request);
//   - obs-fold continuation lines (fasthttp joins them);
//   - bare LF line endings, and whitespace inside a field name.
//
// The handler also refuses CONNECT (405): the gateway routes requests, it
// does not open tunnels. Every rejection closes the connection.
//
// # Streaming and timeouts
//
// The server runs with StreamRequestBody, so a request body flows from the
// client socket to the upstream socket through fixed buffers; the response
// body is read from the upstream connection as a stream and handed to
// fasthttp as the response body stream. Neither is ever held in memory.
// fasthttp sends a stream of unknown length chunked even to an HTTP/1.0
// client, which cannot decode it; for those clients the gateway writes the
// response itself on the hijacked connection and ends the body by closing.
//
// fasthttp's server ReadTimeout runs from the first byte of a request until
// the handler is done with its body. The gateway uses it as
// Options.ReadHeaderTimeout and, through Server.HeaderReceived, replaces it
// for the body with Options.ReadTimeout (none by default), so a large upload
// is not cut by the header timeout. A body too slow for ReadTimeout is 408.
//
// Upstream connections come from one fasthttp.HostClient per instance
// address, but the exchange is driven through HostClient's exported
// AcquireConn/ReleaseConn API rather than HostClient.Do. That is the better
// idea here: fasthttp's client has only a whole-response ReadTimeout, which
// would cut long downloads and event streams, while holding the connection
// lets the gateway set net/http's ResponseHeaderTimeout semantics (deadline
// after the request is written, cleared once the header is in) and close
// the upstream wait when the client hangs up.
//
// A request without a body and with a safe method is sent once more on a
// new connection when a pooled one turns out to have been closed by the
// upstream (closed or reset before the first response byte), as net/http
// does.
//
// fasthttp cannot tell a handler that its client left. While an upstream is
// silent for longer than 50ms, a watcher goroutine peeks at the client
// socket (MSG_PEEK, so fasthttp's reading is undisturbed); a hang-up cancels
// the upstream wait and the request is recorded as 499. Faster answers never
// start the watcher.
//
// # Lifetime
//
// Per-request state lives in a pooled exchange. The attr.Request view aliases
// fasthttp's buffers and is only used during Decide. The exchange outlives
// the handler while a body streams or a WebSocket tunnel runs, so anything it
// needs then (method, path, the decision's identity value and tag) is copied
// into its own buffers first: nothing refers to the RequestCtx after the
// handler returns.
//
// # Access log
//
// With Options.AccessLog set, every request produces one JSON line through
// log/slog's JSON handler, with the keys time, method, path, status,
// upstream, rule, group, degraded, identity_source, latency_ms and bytes.
// Lines go through a bounded queue to a single writer goroutine; when the
// queue is full lines are dropped and counted rather than slowing requests.
package proxy
