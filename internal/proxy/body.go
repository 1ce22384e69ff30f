package proxy

import (
	"errors"
	"io"
)

// reqBody is the client's request body as the upstream request reads it.
// It remembers a failure to read it, which means the client broke off the
// upload (499) or was too slow for ReadTimeout (408), as opposed to a
// failure to write it upstream (502). It also enforces Policy.MaxBodyBytes
// on bodies whose size was not declared, and can first hand out pre, the
// part of a chunked body read while trying to buffer it for a replay.
type reqBody struct {
	ex   *exchange
	src  io.Reader
	size int64 // Content-Length, or -1 for chunked
	n    int64 // bytes read from src
	max  int64 // Policy.MaxBodyBytes; 0 means no limit
	pre  []byte
}

func (b *reqBody) Read(p []byte) (int, error) {
	if len(b.pre) > 0 {
		n := copy(p, b.pre)
		b.pre = b.pre[n:]
		return n, nil
	}
	n, err := b.src.Read(p)
	b.n += int64(n)
	switch {
	case b.max > 0 && b.n > b.max:
		// The upstream gets a truncated body and a closed connection;
		// the client gets 413.
		b.ex.tooLarge = true
		return 0, errBodyTooLarge
	case err == io.EOF && b.size >= 0 && b.n < b.size:
		// fasthttp's server stream reports a connection closed mid-body
		// as a plain EOF.
		b.ex.clientErr = io.ErrUnexpectedEOF
		return n, io.ErrUnexpectedEOF
	case err != nil && err != io.EOF:
		b.ex.clientErr = err
	}
	return n, err
}

// respBody is the upstream response body as fasthttp's server writes it to
// the client. fasthttp closes it, with the write error if any, after the last
// byte or when the response is dropped, and that is when the exchange ends:
// the upstream connection goes back and OnDone and the access log run.
type respBody struct {
	ex *exchange
}

func (b *respBody) Read(p []byte) (int, error) {
	ex := b.ex
	n, err := ex.upBody.Read(p)
	ex.bytesOut += int64(n)
	switch {
	case err == io.EOF:
		ex.upEOF = true
	case err != nil:
		ex.upErr = err
	}
	return n, err
}

// CloseWithError implements fasthttp.ReadCloserWithError.
func (b *respBody) CloseWithError(werr error) error {
	ex := b.ex
	if !ex.streaming {
		return nil
	}
	ex.streaming = false
	ex.releaseUpstream(ex.upEOF)
	switch {
	case ex.upErr != nil:
		ex.p.log.Warn("upstream body broke off",
			"upstream", ex.inst.Addr, "bytes", ex.bytesOut, "error", ex.upErr)
	case werr != nil && !errors.Is(werr, io.EOF):
		ex.p.log.Debug("client write failed", "upstream", ex.inst.Addr, "bytes", ex.bytesOut, "error", werr)
	}
	ex.finish()
	return nil
}
