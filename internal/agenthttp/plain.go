package agenthttp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"strconv"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// Plain is the plain path beside Transport: net/http's Transport over the same connections, held to
// the same bounds once it has read an answer's head. It is lenient where net/http is and RFC 9112
// allows: a folded header line is unfolded, and two equal Content-Length headers count as one.
type Plain struct {
	tr *http.Transport
}

// NewPlain returns a plain transport whose connections come from dial.
func NewPlain(dial func(ctx context.Context) (net.Conn, error)) *Plain {
	return &Plain{tr: &http.Transport{
		DialContext:            func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxIdleConns:           maxIdle,
		MaxIdleConnsPerHost:    maxIdle,
		IdleConnTimeout:        maxIdleAge,
		DisableCompression:     true,
		MaxResponseHeaderBytes: maxHeadBytes,
	}}
}

// CloseIdle closes the idle connections. The transport stays usable.
func (t *Plain) CloseIdle() { t.tr.CloseIdleConnections() }

// RoundTrip is Transport.RoundTrip through net/http.
func (t *Plain) RoundTrip(ctx context.Context, method, target, accept string, deadline time.Time, body []byte, max int64) (*Answer, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	var conn net.Conn // the answer's, closed when the answer is refused after its body was read
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn:        func(info httptrace.GotConnInfo) { conn = info.Conn },
		Got1xxResponse: func(code int, _ textproto.MIMEHeader) error { return badAnswer("status %d", code) },
	})
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+target, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set(protocol.HeaderDeadline, strconv.FormatInt(deadline.UnixNano(), 10))
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := t.tr.RoundTrip(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, plainError(err)
	}
	a := &Answer{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Length: resp.ContentLength,
		keep: !resp.Close, body: resp.Body}
	a.end = func(reuse bool) {
		if !reuse && conn != nil {
			conn.Close()
		}
		resp.Body.Close()
	}
	if err := a.check(resp, max); err != nil {
		a.end(false)
		return nil, err
	}
	return a, nil
}

// check holds an answer net/http read to readHead's bounds.
func (a *Answer) check(resp *http.Response, max int64) error {
	lines := 0
	for _, v := range resp.Header {
		lines += len(v)
	}
	switch {
	case resp.ProtoMajor != 1:
		return badAnswer("protocol %q", clip([]byte(resp.Proto)))
	case a.Status < 200 || a.Status > 599:
		return badAnswer("status %d", a.Status)
	case lines > maxHeadLines:
		return badAnswer("more than %d header lines", maxHeadLines)
	case len(resp.TransferEncoding) > 0:
		return badAnswer("Transfer-Encoding %q: only Content-Length frames an answer", resp.TransferEncoding)
	}
	return a.framing(max)
}

// plainError classifies an error of net/http's round trip: a stream that ended, broke or timed out is
// returned as it is (the agent is unavailable); anything else net/http refused is a malformed answer.
func plainError(err error) error {
	var ne net.Error
	var se *os.SyscallError
	if errors.Is(err, sandbox.ErrProviderProtocol) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, io.ErrClosedPipe) || errors.Is(err, net.ErrClosed) || errors.As(err, &ne) || errors.As(err, &se) {
		return err
	}
	return badAnswer("%v", err)
}
