package agent

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// transport sends HTTP/1.1 requests to one agent over kept-alive connections, reading each answer in
// the caller's goroutine. It is what net/http's Transport does for this one peer without the two
// goroutines per connection the caller hands each request and answer through: on a sandbox's exec path
// those handoffs cost more than the request itself.
//
// A request that cannot be written whole (the agent closed the connection) is sent once more on a new
// one; one that was written is never sent again, unless it is a GET whose answer never began on a
// connection that had been idle.
type transport struct {
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

// roundTrip sends one request and returns the answer, whose Body the caller must close; the connection
// goes back to the idle list when the body was read to its end. ctx must have a deadline: it bounds the
// whole exchange, and ending ctx aborts it; the agent is told the deadline in HeaderDeadline.
func (t *transport) roundTrip(ctx context.Context, method, target, accept string, deadline time.Time, body []byte) (*http.Response, error) {
	head := make([]byte, 0, 160)
	head = append(head, method...)
	head = append(head, ' ')
	head = append(head, target...)
	head = append(head, " HTTP/1.1\r\nHost: agent\r\n"+HeaderDeadline+": "...)
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

	for attempt := 0; ; attempt++ {
		pc, err := t.get(ctx)
		if err != nil {
			return nil, err
		}
		// Closing the connection is what ends a blocked read or write on any kind of stream (a relay's
		// pipes have no deadlines); ctx's own deadline ends it too.
		stop := context.AfterFunc(ctx, func() { pc.Close() })
		bufs := net.Buffers{head, body}
		_, werr := bufs.WriteTo(pc)
		var resp *http.Response
		var rerr error
		if werr == nil {
			resp, rerr = http.ReadResponse(pc.br, &http.Request{Method: method})
		}
		if werr == nil && rerr == nil {
			resp.Body = &answerBody{ReadCloser: resp.Body, t: t, pc: pc, stop: stop, keep: !resp.Close}
			return resp, nil
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
func (t *transport) get(ctx context.Context) (*pconn, error) {
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
	return &pconn{Conn: c, br: bufio.NewReaderSize(c, 16<<10)}, nil
}

func (t *transport) put(pc *pconn) {
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

// closeIdle closes the idle connections. The transport stays usable.
func (t *transport) closeIdle() {
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

// answerBody hands the connection back once the answer has been read to its end.
type answerBody struct {
	io.ReadCloser
	t    *transport
	pc   *pconn
	stop func() bool
	keep bool
	eof  bool
	once sync.Once
}

func (b *answerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *answerBody) Close() error {
	b.once.Do(func() {
		// stop is false when ctx ended meanwhile: the connection is then closed already. An answer not
		// read to its end is not drained (it could be endless): its connection is closed.
		if b.stop() && b.keep && b.eof && b.ReadCloser.Close() == nil {
			b.t.put(b.pc)
			return
		}
		b.pc.Close()
	})
	return nil
}
