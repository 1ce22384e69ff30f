// Package proxy is the gateway's data plane: it validates a request, asks
// the router where it goes, forwards it to one instance of the chosen pool
// with the gateway's headers, and streams the answer back.
//
// # One policy, two codecs
//
// A request arrives through one of two codecs: HTTP/1.1 on fasthttp's
// server (the exchange; proxy.go, transport.go, headers.go, body.go) or
// HTTP/2 on golang.org/x/net/http2's server with a net/http Handler (the
// stream; h2.go). Both embed the same per-request flow (policy.go) and call
// its phases in the same order: begin, decide, admit, acquire (concurrency
// slot, then breaker), pick, decorate the upstream request
// (keepRequestHeader, addForwarded), read the upstream response
// (dropResponseField, takeReported, decisionHeaders, addVia), fall back
// (fallBackOK, fallBack) or fail (classify, failure), and finish (breaker
// outcome, passive health, OnDone, access log, degradation record). The
// policy sees a codec only through small interfaces: attr.Request for the
// decision, inHeader for the client's fields, fieldSink and fields for the
// headers it writes, and codec for what only a codec knows (is a body
// read failure the body's own fault, the client's HTTP version, the
// request head as it went upstream, for a mirror). So a fix to the
// policy lands once for both listeners, as Envoy's one filter chain behind
// its HTTP/1 and HTTP/2 codecs and Pingora's phases over a per-request
// context do.
//
// Why one package and not a package per codec: the phases mutate the
// flow's decision (Guard, FallBack) and breaker ticket, which must not be
// exported to the gateway or anything else; a second package would need
// them exported to reach them. The codecs are separate files with their
// own types, and the only code they share is the policy's.
//
// Upstream, the HTTP/1.1 codec keeps its own transport for http1 pools
// (fasthttp's HostClient connections driven by the exchange, which is
// what makes that path allocation-free), and both codecs use net/http's
// transports for the rest (nethttp.go): http2.Transport for h2c and h2
// pools, and for HTTP/2 clients a net/http Transport limited to HTTP/1.1
// for http1 pools, since the fasthttp transport reads an answer straight
// into a fasthttp response, which an HTTP/2 stream does not have. All
// transports dial through Proxy.dial, so a failure to connect means, for
// the fallback, that nothing was sent. An h2 pool's transport is kept per
// TLS setting, and a reload (Reconfigure) drops the net/http transports
// no request asked for since the reload before, with their idle
// connections (netTransports): the proxy sees pools only through its
// decisions.
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
//     An upstream's trailer fields are filtered as its header is, on every
//     path (dropTrailerField): no hop-by-hop field, decision header,
//     X-Request-Id, Via or reported metric field is relayed, or announced,
//     as a trailer, so the gateway's own fields cannot be forged at the
//     end of an answer (nor moved there: fasthttp files a field set under
//     an announced name in the trailer section).
//   - Inbound X-Forwarded-For/-Proto/-Host (and Forwarded, X-Real-Ip) are
//     dropped unless the TCP peer is in Options.TrustedProxies. X-Gray-Tag is
//     always replaced by the router's decision (which honours an inbound
//     one only from a trusted peer, with trust_gray_tag).
//   - WebSocket handshakes get Upgrade and Connection re-added and become a
//     byte tunnel after the 101.
//   - text/event-stream and bodies of unknown length are flushed chunk by
//     chunk.
//   - One error mapping (classify): client gone → 499 (logged, never
//     written: the connection is closed), no instance → 503, timeout →
//     504, other transport failure → 502. Error bodies name the pool and
//     the request's X-Request-Id, never an instance address.
//
// # Request framing: the listener's Guard
//
// Serve wraps its listener with package listener, whose Guard checks every
// client byte against RFC 9112 before fasthttp parses it, and refuses
// (400, 417, 431 or 505, answered through errorHandler) every request
// that fasthttp's lenient parser, or a server or proxy on either side of
// us, could frame differently; see listener.Guard for the list. fasthttp
// therefore only ever parses requests whose framing is unambiguous. A
// request whose body turns out to be malformed after its head was
// accepted gets 400 (never 499): before anything is sent upstream when
// the malformed part has already arrived (BodyRefused), else by cutting
// the upstream request off. Header fields with "_" in their names are
// dropped unless Options.AllowUnderscoresInHeaders. The handler refuses
// CONNECT (405): the gateway routes requests, it does not open tunnels.
// Every rejection closes the connection.
//
// # Streaming and timeouts
//
// The server runs with StreamRequestBody, so a request body flows from the
// client socket to the upstream socket through fixed buffers; the response
// body is read from the upstream connection as a stream and handed to
// fasthttp as the response body stream. Neither is ever held in memory,
// with one exception: a response body with a Content-Length of at most
// 16 KiB (the common small API answer) is read to its end and copied into
// the response (readInline; readNetInline toward h2 and h2c pools), so
// that the upstream connection goes back to the pool at once and the
// exchange ends in the handler, and so that an upstream that breaks off
// or stalls within it gets the client the gateway's 502 or 504 rather
// than a header that promised more: nothing has been written yet
// (brokeOff). A larger body, or one of unknown length, streams, and one
// that breaks off is cut off and the client connection closed. OnDone
// then runs just before fasthttp writes the response rather than after,
// and a client write error is not seen.
//
// The upstream request's head and framing are written by the gateway
// (buildRequest): Content-Length for a body of known size, else chunked,
// with the client's trailer fields after the last chunk. A chunked body
// held for a replay goes chunked too when trailer fields came with it
// (bufferedTrailers), so that they are not lost. A body the client
// sent with "Expect: 100-continue" follows the upstream's 100 (or
// ExpectContinueTimeout); a final answer instead is relayed and the body
// is not sent. An instance whose last answer came over HTTP/1.0 gets no
// Expect and the body at once (upstreamClient.http10), and a body of
// unknown length read whole and sent with a Content-Length, or a 411 past
// 1 MiB (holdForHTTP10). The upstream's
// response header is read straight into the client's response
// (readResponse), so nothing is copied and the
// upstream's own fields, Date among them, are what the client gets; the
// hop-by-hop ones are then removed (filterResponseHeader). A head whose
// lines end in a bare LF is taken, and one framed two ways closes its
// upstream connection after it (framing.go). Interim (1xx)
// responses are written to the client connection as they arrive, from the
// handler (inPlace: the listener hands fasthttp one request at a time, so
// its earlier answers are on the wire already), and the final answer then
// goes out through fasthttp as any other, on a kept connection. Toward h2
// and h2c pools the same holds for an HTTP/1.1 client: its round trip runs
// on a goroutine of its own, whose transport reports the interim
// responses (got1xx), which the handler forwards while it waits for the
// answer (forwardNetInterim). On a connection that is not the listener's,
// respondHijacked writes them and the answer on the hijacked connection,
// which then closes, as it does a body of unknown length to an HTTP/1.0
// client.
//
// Every stall is bounded. The listener bounds the request line and header
// (ReadHeaderTimeout, from a connection's start or a head's first bytes),
// the keep-alive wait (IdleTimeout), each read of a request body
// (ReadTimeout, 408) and each write to the client (WriteTimeout), from
// its Guard's view of where the connection is (fasthttp's own read
// timeouts are off); the exchange bounds each write
// of the request to the upstream (UpstreamWriteTimeout) and each read of
// its response body (UpstreamReadTimeout), besides ResponseHeaderTimeout.
// Deadlines are moved only when they would be off by more than an eighth
// of their timeout, so a busy connection rarely re-arms a timer.
//
// Upstream connections come from one fasthttp.HostClient per instance
// address, but the exchange is driven through HostClient's exported
// AcquireConn/ReleaseConn API rather than HostClient.Do. That is the better
// idea here: fasthttp's client has only a whole-response ReadTimeout, which
// would cut long downloads and event streams, while holding the connection
// lets the gateway set net/http's ResponseHeaderTimeout semantics (deadline
// after the request is written, cleared before a body is streamed) and close
// the upstream wait when the client hangs up.
//
// A request without a body and with a safe method is sent once more on a
// new connection when a pooled one turns out to have been closed by the
// upstream (closed or reset before the first response byte), as net/http
// does.
//
// fasthttp cannot tell a handler that its client left. While an upstream is
// silent for longer than 50ms, a watcher goroutine peeks at the client
// socket (MSG_PEEK, so fasthttp's reading is undisturbed); a reset cancels
// the upstream wait and the request is recorded as 499. A FIN does not: a
// client that half-closes after its last request still reads, and gets its
// answer; one that closed both ways is found when the answer is written.
// Faster answers never start the watcher.
//
// # Lifetime
//
// Per-request state lives in a pooled exchange. The attr.Request view aliases
// fasthttp's buffers and is only used during DecideInto. It is the one
// implementation of how a request is seen (path, cookies, query, trust and
// the client address behind trusted proxies): explain uses it too, through
// View, so that an explained request is decided as a live one. The exchange outlives
// the handler while a body streams or a WebSocket tunnel runs, so anything it
// needs then (method, path, the decision's identity value and tag) is copied
// into its own buffers first: nothing refers to the RequestCtx after the
// handler returns.
//
// # Route policy
//
// After routing, and before anything is sent upstream, the decision's
// Policy (router.NoPolicy if nil) is applied in order of cost:
//
//   - Limiter: Allow(identity value); no token → 429 with "Retry-After: n",
//     the wait rounded up to whole seconds and at least 1. The upstream is
//     not contacted.
//   - MaxBodyBytes: a Content-Length over it → 413 at once, with
//     "Connection: close", nothing forwarded. (fasthttp has by then read up
//     to 8 KiB of the body, and answered "Expect: 100-continue"; a refusal
//     before the body would need routing in fasthttp's ExpectHandler.) A
//     chunked body is counted as it streams; past the limit the upstream
//     request is aborted (its connection closed mid-body) and the client
//     gets 413 and "Connection: close". The upstream's answer is only read
//     once the whole request is written, so nothing has been sent to the
//     client at that point, and the 413 can always be sent.
//   - UpstreamTimeout replaces Options.ResponseHeaderTimeout for the route,
//     the WebSocket handshake included.
//   - The pool's Gate: Acquire before the pool is contacted (full → 503
//     `upstream "<pool>" is at its concurrency cap`); the slot is released
//     when the exchange ends, which for a streamed body is after its last
//     byte and for a WebSocket when the tunnel closes, and at once when a
//     failed gray attempt falls back.
//   - Only then the breaker of a guarded gray target (Decision.Guard): a
//     request refused by the rate limit, the body size or a full pool never
//     reaches it, so it cannot use up one of a half-open breaker's few
//     probes. A breaker that refuses sends the request to stable
//     (X-Gray-Degraded: breaker), in a slot of the stable pool.
//
// # Breaker outcomes
//
// A decision with a Breaker gets exactly one Record per request that was
// tried on the guarded target: Latency from the start of the attempt
// (connection included) to the response header or the failure, minus the
// time spent waiting for the client's streamed body (a slow upload is not a
// slow upstream), and End from the same clock read. Failed is a connection
// failure, a timeout, an answer that is not HTTP, or a status the breaker
// calls an error (IsErrorStatus). For a response whose body streams, the
// Record waits for the end of the body (with the latency measured at the
// header), and an upstream that breaks off or stalls past
// UpstreamReadTimeout mid-body is a failure; a half-open probe is then out
// until the body ends. A client that went away (499) or was too
// slow (408), and a body cut at MaxBodyBytes (413), are not the upstream's
// failures: they are recorded as successes with the latency seen so far,
// which is a lower bound of the upstream's, so a target slow enough to
// drive clients away still shows in the p99. A pool with no instance is a
// failure with no latency. Requests refused before the target is contacted
// (429, 413 by Content-Length, a full gate, a client that broke off while
// its body was buffered) never asked the breaker, so they hold no ticket
// and no half-open probe, and are not recorded: they say nothing about the
// target, and counting them as successes would dilute its error rate.
// Options.Now must be the breakers' clock, since End is read from it.
//
// # Fallback to stable
//
// When a request to a gray target (Stable set and not the Target) fails
// before any response byte, it is sent once more, to Stable, and the
// client gets stable's answer with "X-Gray-Degraded: fallback" (seed 004
// §3.3.2, result degradation); see router.Decision.FallBack. A gray rule's
// request says "X-Gray-Group: stable". An experiment's request, replayed
// on the control group's pool, keeps the group it was assigned, so the
// experiment counts it as a degraded request of its own group and never as
// one of the control group. The decision seen by OnDone, the access log
// and the degradation log is the degraded one (Degraded fallback, Intended
// the failed pool, Target stable, Tag the stable target's, Breaker nil);
// the breaker has the gray failure. The retry is made only if sending
// twice is harmless:
//
//   - nothing was sent: no instance, connection refused, dial or TLS
//     failure, or no free connection within DialTimeout (any method);
//   - the request was sent but no response byte came back (reset, closed,
//     response header timeout), for idempotent methods only (GET, HEAD,
//     OPTIONS, TRACE, PUT, DELETE). A POST or PATCH that may have reached
//     the upstream gets the gray failure (502/504).
//
// and only if the gateway holds the body: none, or one buffered for the
// purpose before the gray target is contacted, when its Content-Length is
// at most Policy.FallbackBodyBytes (default 64 KiB) or, chunked, when it
// turns out to fit. A larger body streams as before, with no fallback; a
// chunked one that outgrows the buffer is streamed on, what was read
// first included. The replayed body is sent with a Content-Length. Stable
// gets the stable target's own X-Gray-Tag (Decision.StableTag), never the
// failed target's. A client waits for the
// gray failure first: up to DialTimeout for a dead host, or the route's
// header timeout for a silent one. Client failures, a full gate and a
// WebSocket answer that is not a 101 never fall back.
//
// # Degradation record
//
// Every degraded request (breaker, rollback or fallback) is recorded, as
// seed 004 §3.3.2 asks, so that the gray effect can be assessed
// afterwards: through the proxy's slog logger as "degraded request" with
// degraded, reason, rule, group, intended, actual, upstream,
// identity_source and status, whether or not the access log is on, and in the access log. The
// request only queues a small value; a goroutine calls the handler, so a
// slow handler never delays requests. Records that do not fit in the
// queue are counted (DegradationLogDropped) and reported in one summary
// record once the queue drains, so a burst is never silently lost.
//
// # HTTP/2 and gRPC
//
// Serve handles cleartext HTTP/1.1; ServeWith takes a listener.Protocols,
// under which listener.Split hands HTTP/2 connections (ALPN h2 on TLS, the
// preface on h2c) to ServeH2. A stream is proxied as an HTTP/1.1 request
// is, with these differences, each for a reason of the protocol:
//
//   - The upstream request is a net/http request through the pool's
//     transport; its body (upBody) is read by the transport's goroutine,
//     counted against the route's limit, and kept while it fits in the
//     replay limit, so that a request whose gray instance could not be
//     reached is replayed on stable with what was read. A non-gRPC body
//     is buffered for a replay at admit exactly as an HTTP/1.1 one.
//   - A gRPC request (Content-Type application/grpc) is never waited for
//     before the upstream is asked, since its body is a stream of
//     messages; it is replayed on stable only if nothing of it was sent,
//     or all of it was and the gray target was not reached. Its
//     grpc-status (trailers-only header or trailers) goes to the breaker
//     (Breaker.IsErrorGRPC), and the gateway's own errors are
//     trailers-only gRPC answers with grpc-status and grpc-message
//     (grpcCode maps the status as gRPC's HTTP mapping does). A gRPC
//     stream is not bounded by the client read timeout or the upstream
//     read timeout: quiet streams are normal.
//   - A gRPC call's grpc-timeout is, as gRPC defines it, the deadline of
//     the whole call, from its start (newNetCallUntil): when it passes,
//     wherever the call is (waiting for the response header, for the
//     client's next message or the upstream's), the upstream's stream is
//     cancelled and the client's call ends with DEADLINE_EXCEEDED: a
//     trailers-only answer before the header (the gateway's 504), in the
//     trailers after it (the upstream's status, grpc_status 4); the
//     access log's timeout is grpc_timeout. A client whose library
//     enforces its deadline ends the call itself at the same moment; the
//     gateway's deadline is for those that do not, and for upstreams that
//     ignore the grpc-timeout they are sent. A deadline passed before the
//     header is held against the instance (breaker, passive health) only
//     if it had the whole request, else it may rightly have waited for
//     the rest (errDeadlineSending); one passed after the header is
//     judged as the upstream's own DEADLINE_EXCEEDED would be (the
//     breaker's grpc_error_codes).
//   - The response header waits for the end of the request body before
//     its timeout starts (netCall), like the HTTP/1.1 transport's, so a
//     client-streaming call is not cut while it sends.
//   - Cancellation goes both ways: a client's RST_STREAM ends the
//     upstream call (its context), an upstream's reset after the header
//     ends a gRPC call with grpc-status CANCELLED or UNAVAILABLE in the
//     trailers, and any other stream is reset. An upstream's reset
//     before the header is answered at once even while the client sends
//     nothing (a bidirectional call waiting for its first answer, a
//     paused upload): the HTTP/2 transport waits for its read of the
//     request body to return, so that read gives up when the transport
//     closes the body (upBody), and what it brings later is kept for the
//     next attempt (the client's body reads ahead, readAhead). So does
//     net/http's Transport toward an http1 pool when the upstream closes
//     or resets the connection without an answer, and it never closes
//     the body: the read gives up when that connection closes
//     (headConn). It gives up too when the call's context ends (a
//     deadline, the read timeout), which the HTTP/2 transport does not
//     look at while it waits on the body. A refused stream is then
//     handled as below, and any other reset or close gets the error
//     mapping (502; gRPC UNAVAILABLE, or CANCELLED for CANCEL). An
//     upstream that answers early, before it read the body, is relayed
//     as it comes.
//
// An HTTP/1.1 client reaches h2 and h2c pools through the same
// transports (h1net.go), its streamed body read ahead as an HTTP/2
// client's is (exchange.aheadBody), so an upstream's reset is answered
// while its upload is paused too; the exchange settles that read as it
// ends, before fasthttp reads the connection again. Toward an http1 pool
// its own transport sends each part of a streamed body as it arrives,
// and watches the upstream connection meanwhile (watchUpstream): a close,
// a reset or a final answer ends the wait for the client's next part
// (listener.Conn.Interrupt), and the answer is relayed or the close is a
// 502. A WebSocket handshake to an h2 or h2c pool is refused. A
// stream an h2 or h2c instance refuses unprocessed is handled alike for
// both codecs (netAttempt): asked once more at once, then the attempt
// ends as one never sent and may go to stable with its whole body (a
// streamed one resumed, what the transport read of it first, if that
// fits in Policy.FallbackBodyBytes); a request without a body waits out
// the transport's first one-second back-off, and then goes to stable only
// if idempotent.
//
// # Shadow traffic
//
// A decision with a Mirror (router.Decision.Mirror: the rule's stable
// users its mirror bucket selects, for the methods it allows) is served
// as any other; the flow (shadow.go) also keeps what package mirror needs,
// in memory of its own: the request body when it fits in the mirror's
// max_body (admitted as a replay body is; a longer or streamed one makes
// the copy a counted drop), the request head as it went upstream
// (codec.sentRequest: the gateway's X-Forwarded-*, X-Gray-Tag, baggage,
// X-Request-Id and Via included), the status and header fields of the
// upstream's answer before the gateway adds its own, and up to
// Set.MaxResponseBody bytes of its body as they pass to the client. In
// the finish phase, after OnDone, the access log and the breaker outcome,
// it hands the copy to Options.Mirrors, which queues or drops it and
// returns at once: the client's answer never waits for the mirror, and
// the copy never passes through OnDone, the access log, a breaker or
// passive health, so experiments, rollouts, breakers and request metrics
// never count it. Nothing is handed over when the gateway answered
// itself (499, 502, 503, 504) or the primary's answer broke off. gRPC
// calls and WebSocket handshakes are never mirrored.
//
// # Tracing
//
// With Options.Tracer set, the flow (trace.go) starts one server span per
// routed request after the decision, from the client's traceparent and
// tracestate (parent-based sampling, package tracing), records the
// decision on it (and again after Guard or FallBack changed it), replaces
// the client's traceparent and tracestate going upstream with graygate's
// span as the parent, sampled or not, and ends it in the finish phase
// with the status and, for a failure of the gateway's own, error.type
// (failureType). With Options.Tracer nil the client's trace context
// passes through untouched and the cost is a nil check: BenchmarkTracing/off
// is BenchmarkProxy/plain's 0 allocations.
//
// Tracing on or off, the upstream request's baggage is rewritten
// (addTraceFields, tracing.AppendBaggage): the client's members, every
// baggage field joined into one list, in order and byte for byte, except
// any gray.tag, followed by gray.tag=<the decision's tag>. A trusted
// peer's gray.tag was honoured by the router (trust_gray_tag) and comes
// back as the tag; anyone else's is dropped.
//
// # Lifecycle
//
// Shutdown closes the listeners, closes idle client connections, answers
// requests in flight with "Connection: close" and waits for them until its
// context ends; then it closes what is still open. HTTP/2 connections get
// a GOAWAY and their streams are waited for the same way, and so are
// WebSocket tunnels and the other connections fasthttp has handed over
// (hijacked), which fasthttp's own Shutdown neither waits for nor closes;
// a WebSocket handshake that comes once Shutdown has begun gets a 503.
// A connection the TLS or h2c listener took before it closed is handed on
// once its handshake or preface ends (listener.Split), and is served:
// Shutdown returns once every connection a listener took has closed
// (awaitAccepted), and ServeH2 serves one it gets after the GOAWAYs went
// out, with a GOAWAY after its first answer, or after ReadHeaderTimeout
// if it opens no stream. At the context's end one still in its handshake
// is closed too (Gate.CloseSorting).
// For a restart
// without downtime (the TLS listener included) the new process binds the same address with Listen(..., true)
// (SO_REUSEPORT, Linux), and the old one is sent SIGTERM and calls
// Shutdown: from the moment it closes its listener the kernel gives new
// connections to the new process only, while keep-alive clients are moved
// by "Connection: close" and by the closing of idle connections (clients
// retry idempotent requests on a connection closed while idle, RFC 9112
// section 9.3.1). One race is left, in the kernel: a connection that has
// completed its handshake but is still in the old listener's accept queue
// when the listener closes is reset. With clients that open a connection
// per request it happens (in our tests, a few requests in half of the
// handovers); Linux 5.14 and later migrate those connections to the new
// listener with sysctl net.ipv4.tcp_migrate_req=1, which deployments
// relying on this should set. Inheriting the listening socket instead
// (passing its descriptor to the new process) avoids the race entirely.
//
// A client that sends its header slowly (slowloris) is cut off by
// ReadHeaderTimeout, which bounds the whole request line and header, not
// each read; an idle keep-alive connection by IdleTimeout.
//
// # Cost
//
// For a request with no policy, breaker, gate or stable target the new
// checks are a few comparisons (about 8 ns, BenchmarkGuards/plain) and
// BenchmarkProxy/plain stays at 0 allocations. A gray request with a
// breaker, a gate and a stable target costs about 125 ns more (two clock
// reads and the breaker's Record dominate), and a
// rate limiter about 95 ns on top plus one small allocation: the identity
// is copied for the Limiter, which may keep it as a map key.
//
// # System calls
//
// A keep-alive request costs the gateway, on the client side, the read of
// the request, one read that finds nothing more (EAGAIN) before the poller
// waits, and the write of the answer; on the upstream side, the write and
// the read, and a peek (peekIdle, which finds stray bytes or a close that
// arrived while it was idle) at a pooled connection that sat idle for
// longer than peekAfter (10 ms; under load the LIFO pool hands out one that
// answered microseconds ago, when a peek has nothing to find), or that
// carries a request that may not be sent twice (see getChecked). The
// upstream read needs no failed attempt: a request the gateway holds whole
// is flushed from inside a syscall.RawConn read callback, which arms the
// wait before the write, so an answer arriving at once is not missed
// (flushAndWait; the answer's arrival wakes the wait, whatever was in the
// socket before the request). An earlier trick did the same on the client
// side, holding back the response write until fasthttp's next read; it
// lost the readiness of a pipelined request that arrived while the handler
// ran, and hung it, so it is gone: a client's next request may already be
// there, and only a read can tell. What the listener does instead is let
// the other runnable goroutines go first (listener.Conn.Read, between
// requests), so that under load the next request has arrived by the time
// it reads, and that read does not fail.
//
// Every one of these calls on a plain TCP connection goes through rawio,
// which makes it without the runtime's system-call bookkeeping (the socket
// is non-blocking; the wait is the poller's).
//
// # Access log
//
// With Options.AccessLog set, every request produces one JSON line with the
// keys time, method, path, status, upstream (the instance address), pool
// (the pool that served it), rule, group, degraded, intended_upstream (the
// pool the rule chose, for a degraded request), identity_source, latency_ms,
// bytes, request_id and, when one fired, timeout (its config key, or
// grpc_timeout for a gRPC call's own deadline), encoded
// by hand into a pooled buffer. A value the request does not have is
// empty: the upstream of a request refused before one was picked, or the
// method and path of a connection answered 408, 400 or 431 before
// fasthttp parsed a request head (one that sent nothing, say). Lines are
// appended to a
// bounded buffer that one writer goroutine writes out in batches of at most
// 64 KiB; when the buffer is full lines are dropped and counted rather than
// slowing requests.
package proxy
