package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandbox"
)

// How long a port's kept-alive connection waits for its next request, and how long a port's
// Transport is kept unused before it is dropped.
const (
	portIdleConnTimeout = 30 * time.Second
	portTransportIdle   = 2 * portIdleConnTimeout
)

// portConns is the proxy's RoundTripper: a Transport per sandbox and port, made for one generation
// of the sandbox and one version of its record (portTarget.since), whose kept-alive connections are
// reused across requests to that port. A connection is only ever reused for what it was made to: a
// request that read a later generation or record (after a recreate, a pause and resume) replaces the
// Transport, one that read an earlier one (before them) gets a connection of its own, not kept. Every
// Transport of a sandbox is also dropped, its idle connections closed and its busy ones when their
// request ends, as soon as the event log says the sandbox left ready (paused, stopped, terminated,
// recreated, failed), and a Transport unused for portTransportIdle is dropped.
type portConns struct {
	s       *Server
	timeout time.Duration // the server's answer's headers

	mu       sync.Mutex
	m        map[sandbox.ID]map[int]*portTransport
	watching bool
}

type portTransport struct {
	gen   sandbox.Generation
	since time.Time // portTarget.since
	t     *http.Transport
	lean  *leanConns
	used  time.Time // guarded by portConns.mu
}

func (pt *portTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if lean(req) {
		return pt.lean.RoundTrip(req)
	}
	return pt.t.RoundTrip(req)
}

// close closes the idle connections, and the busy ones as their requests end.
func (pt *portTransport) close() {
	pt.t.CloseIdleConnections()
	pt.lean.close()
}

func newPortConns(s *Server) *portConns {
	timeout := s.portResponseTimeout
	if timeout <= 0 {
		timeout = DefaultPortResponseTimeout
	}
	return &portConns{s: s, timeout: timeout, m: map[sandbox.ID]map[int]*portTransport{}}
}

// RoundTrip passes req on to the target its context holds (proxyKey).
func (pc *portConns) RoundTrip(req *http.Request) (*http.Response, error) {
	p := req.Context().Value(proxyKey{}).(*proxied)
	return pc.transport(p.target).RoundTrip(req)
}

// transport is the Transport of t, made when t's generation has none.
func (pc *portConns) transport(t portTarget) http.RoundTripper {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	ports := pc.m[t.ref.ID]
	pt := ports[t.port]
	switch {
	case pt != nil && pt.gen == t.ref.Generation && pt.since.Equal(t.since):
	case pt != nil && (pt.gen > t.ref.Generation || pt.gen == t.ref.Generation && pt.since.After(t.since)):
		one := pc.newTransport(t)
		one.t.DisableKeepAlives = true
		one.lean.closed = true
		return one
	default:
		if pt != nil {
			pt.close()
		}
		if ports == nil {
			ports = map[int]*portTransport{}
			pc.m[t.ref.ID] = ports
		}
		pt = pc.newTransport(t)
		ports[t.port] = pt
		pc.watchLocked()
	}
	pt.used = time.Now()
	return pt
}

func (pc *portConns) newTransport(t portTarget) *portTransport {
	dial := func(ctx context.Context) (net.Conn, error) { return pc.s.rt.DialPort(ctx, t.ref, t.port) }
	pt := &portTransport{gen: t.ref.Generation, since: t.since, lean: &leanConns{dial: dial, timeout: pc.timeout}}
	pt.t = &http.Transport{
		DialContext:            func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxIdleConns:           16,
		MaxIdleConnsPerHost:    16,
		IdleConnTimeout:        portIdleConnTimeout,
		ResponseHeaderTimeout:  pc.timeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxPortHeaderBytes,
		DisableCompression:     true,
	}
	return pt
}

// drop closes the Transports of sandbox id.
func (pc *portConns) drop(id sandbox.ID) {
	pc.mu.Lock()
	ports := pc.m[id]
	delete(pc.m, id)
	pc.mu.Unlock()
	for _, pt := range ports {
		pt.close()
	}
}

// sweep drops the Transports unused since before.
func (pc *portConns) sweep(before time.Time) {
	pc.mu.Lock()
	var old []*portTransport
	for id, ports := range pc.m {
		for port, pt := range ports {
			if pt.used.Before(before) {
				old = append(old, pt)
				delete(ports, port)
			}
		}
		if len(ports) == 0 {
			delete(pc.m, id)
		}
	}
	pc.mu.Unlock()
	for _, pt := range old {
		pt.close()
	}
}

// watchLocked starts, once, the goroutine that drops the Transports of a sandbox that leaves ready,
// from the event log's cursor now on, until the server closes.
func (pc *portConns) watchLocked() {
	if pc.watching {
		return
	}
	pc.watching = true
	wake, stop := pc.s.rt.Watch()
	ctx, cancel := context.WithCancel(context.Background())
	cursor, err := pc.s.rt.LastCursor(ctx)
	if err != nil {
		cursor = -1 // read it again at the first wake
	}
	go func() {
		defer stop()
		defer cancel()
		sweep := time.NewTicker(portTransportIdle)
		defer sweep.Stop()
		for {
			select {
			case <-pc.s.done:
				pc.sweep(time.Now().Add(time.Hour))
				return
			case <-sweep.C:
				pc.sweep(time.Now().Add(-portTransportIdle))
			case <-wake:
				cursor = pc.readEvents(ctx, cursor)
			}
		}
	}()
}

// readEvents drops the Transports of each sandbox the events after cursor move out of ready, and
// returns the cursor of the last event read.
func (pc *portConns) readEvents(ctx context.Context, cursor int64) int64 {
	for {
		if cursor < 0 {
			c, err := pc.s.rt.LastCursor(ctx)
			if err != nil {
				return cursor
			}
			cursor = c
		}
		evs, err := pc.s.rt.Events(ctx, sandbox.EventQuery{After: cursor, Limit: sandbox.MaxEventPage})
		if err != nil {
			return cursor
		}
		for _, ev := range evs {
			cursor = ev.Cursor
			if ev.Type != sandbox.EventStateChanged {
				continue
			}
			var d sandbox.StateChangedData
			if json.Unmarshal(ev.Data, &d) != nil || d.To != sandbox.StateReady {
				pc.drop(ev.SandboxID)
			}
		}
		if len(evs) < sandbox.MaxEventPage {
			return cursor
		}
	}
}

// leanConns is the kept-alive connections of one port for requests with no body and no upgrade
// (GET and HEAD): such a request is written, and its answer read, on the goroutine of the request
// that is being proxied, where http.Transport hands both to goroutines of the connection's own, two
// more wake-ups each way. Anything else goes through the port's http.Transport.
type leanConns struct {
	dial    func(ctx context.Context) (net.Conn, error)
	timeout time.Duration // the answer's head

	mu     sync.Mutex
	idle   []*leanConn
	closed bool
}

// maxLeanIdle bounds the idle connections of a port.
const maxLeanIdle = 16

type leanConn struct {
	net.Conn
	lr   *io.LimitedReader // under br: bounds the answer's head
	br   *bufio.Reader
	bw   *bufio.Writer
	used time.Time // when it went idle
}

// lean tells whether req goes through leanConns.
func lean(req *http.Request) bool {
	return (req.Method == http.MethodGet || req.Method == http.MethodHead) &&
		(req.Body == nil || req.Body == http.NoBody) && req.ContentLength == 0 &&
		req.Header.Get("Upgrade") == "" && req.Header.Get("Expect") == "" && !req.Close
}

// get takes an idle connection, or nil.
func (lc *leanConns) get() *leanConn {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for len(lc.idle) > 0 {
		c := lc.idle[len(lc.idle)-1]
		lc.idle = lc.idle[:len(lc.idle)-1]
		if time.Since(c.used) < portIdleConnTimeout {
			return c
		}
		c.Close()
	}
	return nil
}

// put keeps c for the next request, or closes it.
func (lc *leanConns) put(c *leanConn) {
	lc.mu.Lock()
	if lc.closed || len(lc.idle) >= maxLeanIdle || c.br.Buffered() > 0 {
		lc.mu.Unlock()
		c.Close() // bytes nobody asked for are no answer to the next request
		return
	}
	c.used = time.Now()
	lc.idle = append(lc.idle, c)
	lc.mu.Unlock()
}

// close closes the idle connections, and those busy as their requests end.
func (lc *leanConns) close() {
	lc.mu.Lock()
	idle := lc.idle
	lc.idle, lc.closed = nil, true
	lc.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
}

// RoundTrip sends req, which lean accepted, on a kept-alive connection or a new one. A kept-alive
// connection the server closed (or answered 408 on) while it was idle is replaced once, as
// http.Transport does: both methods are idempotent, and nothing of a body was sent.
func (lc *leanConns) RoundTrip(req *http.Request) (*http.Response, error) {
	for {
		c := lc.get()
		reused := c != nil
		if c == nil {
			conn, err := lc.dial(req.Context())
			if err != nil {
				return nil, err
			}
			lr := &io.LimitedReader{R: conn}
			c = &leanConn{Conn: conn, lr: lr, br: bufio.NewReaderSize(lr, 16<<10), bw: bufio.NewWriterSize(conn, 4<<10)}
		}
		resp, err := lc.exchange(req, c)
		if err == nil {
			return resp, nil
		}
		c.Close()
		if !reused || req.Context().Err() != nil || !errors.Is(err, errStale) {
			return nil, err
		}
	}
}

// errStale: a kept-alive connection had ended before the request was answered.
var errStale = errors.New("the kept-alive connection had ended")

// exchange writes req on c and reads the head of its answer; the answer's body returns c to the
// pool once read to its end.
func (lc *leanConns) exchange(req *http.Request, c *leanConn) (*http.Response, error) {
	ctx := req.Context()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	_ = c.SetDeadline(time.Now().Add(lc.timeout))
	c.lr.N = maxPortHeaderBytes + int64(c.br.Size())
	err := req.Write(c.bw)
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil && ctx.Err() == nil {
		err = fmt.Errorf("%w: %v", errStale, err) // nothing was answered: a new connection may be
	}
	var resp *http.Response
	for err == nil {
		if _, err = c.br.Peek(1); err != nil {
			if err == io.EOF || errors.Is(err, syscall.ECONNRESET) {
				err = errStale
			}
			break
		}
		resp, err = http.ReadResponse(c.br, req)
		if err != nil {
			if c.lr.N <= 0 {
				err = fmt.Errorf("an answer's head past %d bytes", maxPortHeaderBytes)
			}
			break
		}
		if resp.StatusCode == http.StatusRequestTimeout {
			resp.Body.Close()
			err = errStale
			break
		}
		if resp.StatusCode >= 200 {
			break
		}
		resp.Body.Close() // 1xx: informational, the answer follows
		if resp.StatusCode == http.StatusSwitchingProtocols {
			err = errors.New("an upgrade nobody asked for")
		}
	}
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	c.lr.N = math.MaxInt64
	keep := !resp.Close
	if resp.Body == http.NoBody {
		if keep {
			lc.put(c)
		} else {
			c.Close()
		}
		return resp, nil
	}
	resp.Body = &leanBody{rc: resp.Body, c: c, lc: lc, keep: keep, stop: context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })}
	return resp, nil
}

// leanBody is an answer's body: read to its end, its connection goes back to the pool; closed before,
// or cut by the request's end, its connection is closed.
type leanBody struct {
	rc   io.ReadCloser
	c    *leanConn
	lc   *leanConns
	keep bool
	stop func() bool
	mu   sync.Mutex
	done bool
}

func (b *leanBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.finish(true)
	}
	return n, err
}

func (b *leanBody) Close() error {
	b.finish(false)
	return nil
}

func (b *leanBody) finish(whole bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	b.done = true
	if b.stop() && whole && b.keep {
		b.lc.put(b.c)
		return
	}
	b.c.Close()
}
