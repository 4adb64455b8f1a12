// Package agenthttp is the transport of the agent's client (agent/agentclient): HTTP/1.1 requests to one
// agent over kept-alive connections, each answer read in the caller's goroutine. It does what net/http's
// Transport does for this one peer without the two goroutines per connection that a request and its
// answer are handed through, a tenth of a small call's time here (docs/design/agenthttp.md). Plain is
// net/http's Transport held to the same bounds: the plain path, which SANDBOXD_AGENT_PLAIN selects.
//
// Main invariant: what the agent answers is bounded before it is read, and an answer refused, or not
// read to its end, leaves its connection closed, never idle: code in the sandbox may answer in the
// agent's place.
package agenthttp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// Transport sends HTTP/1.1 requests to one agent over kept-alive connections, reading each answer in
// the caller's goroutine.
//
// A request that cannot be written whole (the agent closed the connection) is sent once more on a new
// one; one that was written is never sent again, unless it is a GET whose answer never began on a
// connection that had been idle.
//
// What the agent answers is bounded before it is read (code in the sandbox may answer in its place):
// the head to maxHeadBytes and maxHeadLines, the body to one Content-Length within the call's bound
// (readHead). An answer refused, or not read to its end, leaves its connection closed, never idle.
type Transport struct {
	dial func(ctx context.Context) (net.Conn, error)

	mu   sync.Mutex
	idle []*pconn
}

// maxIdle bounds the connections kept open between calls, and maxIdleAge how long one may wait: a
// relayed stream cannot be peeked (see alive), and one that died while idle would fail its next call.
const (
	maxIdle    = 16
	maxIdleAge = 60 * time.Second
)

// oneWriteBytes is the largest body sent in the same write as the request's head. On a socket the
// two writes are one writev anyway; on a relayed stream (pods/exec) each write is a frame of its own
// through every hop, and a keystroke's byte would reach the agent one frame after its head
// (docs/performance.md, "Terminals").
const oneWriteBytes = 16 << 10

// New returns a transport whose connections come from dial.
func New(dial func(ctx context.Context) (net.Conn, error)) *Transport {
	return &Transport{dial: dial}
}

type pconn struct {
	net.Conn
	br     *bufio.Reader
	reused bool
	since  time.Time // idle since
	once   sync.Once
}

// Close closes the connection once: a cancelled call and its caller may both close it.
func (pc *pconn) Close() error {
	err := net.ErrClosed
	pc.once.Do(func() { err = pc.Conn.Close() })
	return err
}

// RoundTrip sends one request and returns the head of its answer, whose body the caller reads from the
// answer and ends with Release. ctx must have a deadline: it bounds the whole exchange, and ending ctx
// aborts it; the agent is told the deadline in protocol.HeaderDeadline. max bounds the body of a 2xx
// answer (readHead says the rest); an answer past a bound is refused before its body is read.
func (t *Transport) RoundTrip(ctx context.Context, method, target, accept string, deadline time.Time, body []byte, max int64) (*Answer, error) {
	head := make([]byte, 0, 160)
	head = append(head, method...)
	head = append(head, ' ')
	head = append(head, target...)
	head = append(head, " HTTP/1.1\r\nHost: agent\r\n"+protocol.HeaderDeadline+": "...)
	head = strconv.AppendInt(head, deadline.UnixNano(), 10)
	if accept != "" {
		head = append(head, "\r\nAccept: "...)
		head = append(head, accept...)
	}
	if body != nil {
		head = append(head, "\r\nContent-Length: "...)
		head = strconv.AppendInt(head, int64(len(body)), 10)
	}
	head = append(head, "\r\n\r\n"...)
	// A small body goes in the head's write (an empty one is no write at all: it would cost a relayed
	// stream a frame of its own); a larger one in a write of its own, not copied.
	first, rest := head, body
	if len(body) <= oneWriteBytes {
		first, rest = append(head, body...), nil
	}

	for attempt := 0; ; attempt++ {
		pc, err := t.get(ctx)
		if err != nil {
			return nil, err
		}
		// Closing the connection is what ends a blocked read or write on any kind of stream (a relay's
		// pipes have no deadlines); ctx's own deadline ends it too.
		stop := context.AfterFunc(ctx, func() { pc.Close() })
		bufs := net.Buffers{first}
		if len(rest) > 0 {
			bufs = append(bufs, rest)
		}
		_, werr := bufs.WriteTo(pc)
		var a *Answer
		var rerr error
		if werr == nil {
			a, rerr = readHead(pc.br, max)
		}
		if werr == nil && rerr == nil {
			a.body = pc.br
			a.end = func(reuse bool) {
				// stop is false when ctx ended meanwhile: the connection is then closed already.
				if stop() && a.keep && reuse {
					t.put(pc)
					return
				}
				pc.Close()
			}
			return a, nil
		}
		stop()
		pc.Close()
		err = werr
		if err == nil {
			err = rerr
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		// A request that could not be written whole cannot have been served; a GET whose answer never
		// began, on a connection that had waited idle, was most likely refused by a closing peer.
		retry := attempt == 0 && (werr != nil ||
			(pc.reused && method == http.MethodGet && errors.Is(rerr, io.EOF) && pc.br.Buffered() == 0))
		if !retry {
			return nil, err
		}
	}
}

// get returns an idle connection that the agent has not closed, or a new one.
func (t *Transport) get(ctx context.Context) (*pconn, error) {
	for {
		t.mu.Lock()
		n := len(t.idle)
		if n == 0 {
			t.mu.Unlock()
			break
		}
		pc := t.idle[n-1]
		t.idle = t.idle[:n-1]
		t.mu.Unlock()
		if time.Since(pc.since) < maxIdleAge && alive(pc.Conn) {
			pc.reused = true
			return pc, nil
		}
		pc.Close()
	}
	c, err := t.dial(ctx)
	if err != nil {
		return nil, err
	}
	return &pconn{Conn: c, br: bufio.NewReaderSize(c, maxHeadBytes)}, nil
}

func (t *Transport) put(pc *pconn) {
	if pc.br.Buffered() > 0 {
		pc.Close() // the agent said more than its answer: nothing after it can be trusted
		return
	}
	pc.since = time.Now()
	t.mu.Lock()
	if len(t.idle) < maxIdle {
		t.idle = append(t.idle, pc)
		pc = nil
	}
	t.mu.Unlock()
	if pc != nil {
		pc.Close()
	}
}

// CloseIdle closes the idle connections. The transport stays usable.
func (t *Transport) CloseIdle() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, pc := range idle {
		pc.Close()
	}
}

// alive reports whether an idle connection is still open and silent: a peek that finds the end of the
// stream, an error or unsolicited bytes means it is not. A connection that is not a socket (a relayed
// stream) is taken as alive.
func alive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		ok = errors.Is(err, unix.EAGAIN) // nothing to read, no end of stream
		return true
	})
	return err == nil && ok
}

// Answer is the head of an agent's answer, as a transport read it, and the reader of its body: exactly
// Length bytes.
type Answer struct {
	Status      int
	ContentType string
	Length      int64
	keep        bool // neither an HTTP/1.0 answer nor "Connection: close"

	left int64     // of the body, still to read
	body io.Reader // the connection's, from the body's first byte
	// end ends the answer, once: the connection serves the next call only when reuse is true.
	end  func(reuse bool)
	once sync.Once
}

// Read reads the body; a connection that ends before it does is io.ErrUnexpectedEOF.
func (a *Answer) Read(p []byte) (int, error) {
	if a.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > a.left {
		p = p[:a.left]
	}
	n, err := a.body.Read(p)
	a.left -= int64(n)
	if err == io.EOF && a.left > 0 {
		err = io.ErrUnexpectedEOF
	} else if err == io.EOF {
		err = nil // net/http's body says EOF with its last bytes
	}
	return n, err
}

// Release ends the answer; err is what the caller made of it. The connection goes back to the idle list
// only when the body was read to its end and err is not a protocol error: an answer refused (one past
// a bound, or malformed) leaves its connection closed, as does one not read to its end (it is not
// drained: it could be endless).
func (a *Answer) Release(err error) {
	a.once.Do(func() { a.end(a.left == 0 && !errors.Is(err, sandbox.ErrProviderProtocol)) })
}

// MaxErrorBytes bounds the body of an answer whose status is not 2xx.
const MaxErrorBytes = 64 << 10

// Bounds of an answer's head: its status line and header lines with their line ends, and how many
// header lines (the agent sends three). The connection's read buffer is maxHeadBytes, so that no line
// is held beyond it.
const (
	maxHeadBytes = 16 << 10
	maxHeadLines = 64
)

// readHead reads the head of an answer from br, to at most maxHeadBytes and maxHeadLines. Its body
// must be framed by exactly one Content-Length (Transfer-Encoding is refused: the agent never sends it)
// of at most max bytes, MaxErrorBytes when the status is not 2xx; 204 and 304 have none. The status is
// between 200 and 599. An answer that ends before its first byte is io.EOF, one that ends in its head
// io.ErrUnexpectedEOF; anything malformed or past a bound is sandbox.ErrProviderProtocol.
func readHead(br *bufio.Reader, max int64) (*Answer, error) {
	a := &Answer{Length: -1}
	used, lines := 0, 0
	for {
		line, err := br.ReadSlice('\n')
		used += len(line)
		if used > maxHeadBytes || err == bufio.ErrBufferFull {
			return nil, badAnswer("head past %d bytes", maxHeadBytes)
		}
		if err == io.EOF && used > 0 {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return nil, err
		}
		line = bytes.TrimSuffix(line[:len(line)-1], []byte{'\r'})
		switch {
		case a.Status == 0:
			err = a.statusLine(line)
		case len(line) == 0:
			return a, a.framing(max)
		default:
			if lines++; lines > maxHeadLines {
				return nil, badAnswer("more than %d header lines", maxHeadLines)
			}
			err = a.header(line)
		}
		if err != nil {
			return nil, err
		}
	}
}

// statusLine reads "HTTP/1.1 200 OK".
func (a *Answer) statusLine(line []byte) error {
	proto, rest, _ := bytes.Cut(line, []byte{' '})
	code, _, _ := bytes.Cut(rest, []byte{' '})
	switch string(proto) {
	case "HTTP/1.1":
		a.keep = true
	case "HTTP/1.0":
	default:
		return badAnswer("status line %q", clip(line))
	}
	if len(code) != 3 || !every(code, isDigit) || code[0] < '2' || code[0] > '5' {
		return badAnswer("status line %q", clip(line))
	}
	a.Status = int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0')
	return nil
}

// header reads one header line. Only the fields the client uses are kept; every line must be well
// formed (no line folding, no space before the colon, no control bytes).
func (a *Answer) header(line []byte) error {
	name, value, ok := bytes.Cut(line, []byte{':'})
	if !ok || len(name) == 0 || !every(name, isTokenByte) || !every(value, isValueByte) {
		return badAnswer("header line %q", clip(line))
	}
	value = bytes.Trim(value, " \t")
	switch {
	case bytes.EqualFold(name, []byte("Content-Length")):
		if a.Length >= 0 {
			return badAnswer("two Content-Length headers")
		}
		// Digits only, none of ParseInt's signs; ParseUint refuses the empty string and past 2^63-1.
		n, err := strconv.ParseUint(string(value), 10, 63)
		if err != nil {
			return badAnswer("Content-Length %q", clip(value))
		}
		a.Length = int64(n)
	case bytes.EqualFold(name, []byte("Transfer-Encoding")):
		return badAnswer("Transfer-Encoding %q: only Content-Length frames an answer", clip(value))
	case bytes.EqualFold(name, []byte("Connection")):
		for _, opt := range bytes.Split(value, []byte{','}) {
			if bytes.EqualFold(bytes.Trim(opt, " \t"), []byte("close")) {
				a.keep = false
			}
		}
	case bytes.EqualFold(name, []byte("Content-Type")):
		a.ContentType = string(value)
	}
	return nil
}

// framing checks the body's length against its bound, once the head is read.
func (a *Answer) framing(max int64) error {
	switch {
	case a.Status == http.StatusNoContent || a.Status == http.StatusNotModified:
		a.Length = 0
	case a.Length < 0:
		return badAnswer("status %d without a Content-Length", a.Status)
	}
	if a.Status/100 != 2 {
		max = MaxErrorBytes
	}
	if a.Length > max {
		return badAnswer("status %d: Content-Length %d past %d", a.Status, a.Length, max)
	}
	a.left = a.Length
	return nil
}

func badAnswer(format string, args ...any) error {
	return fmt.Errorf("answer: "+format+": %w", append(args, sandbox.ErrProviderProtocol)...)
}

// clip is at most 64 bytes of b, for an error message.
func clip(b []byte) []byte { return b[:min(len(b), 64)] }

// every reports whether ok holds for each byte of b.
func every(b []byte, ok func(byte) bool) bool {
	for _, c := range b {
		if !ok(c) {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isTokenByte reports whether c may be in a header name (RFC 9110's tchar).
func isTokenByte(c byte) bool {
	return c > ' ' && c < 0x7f && strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) < 0
}

// isValueByte reports whether c may be in a header value: no control byte but a tab.
func isValueByte(c byte) bool { return (c >= ' ' || c == '\t') && c != 0x7f }
