package httpapi

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sync"
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
	used  time.Time // guarded by portConns.mu
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
func (pc *portConns) transport(t portTarget) *http.Transport {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	ports := pc.m[t.ref.ID]
	pt := ports[t.port]
	switch {
	case pt != nil && pt.gen == t.ref.Generation && pt.since.Equal(t.since):
	case pt != nil && (pt.gen > t.ref.Generation || pt.gen == t.ref.Generation && pt.since.After(t.since)):
		one := pc.newTransport(t)
		one.DisableKeepAlives = true
		return one
	default:
		if pt != nil {
			pt.t.CloseIdleConnections()
		}
		if ports == nil {
			ports = map[int]*portTransport{}
			pc.m[t.ref.ID] = ports
		}
		pt = &portTransport{gen: t.ref.Generation, since: t.since, t: pc.newTransport(t)}
		ports[t.port] = pt
		pc.watchLocked()
	}
	pt.used = time.Now()
	return pt.t
}

func (pc *portConns) newTransport(t portTarget) *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return pc.s.rt.DialPort(ctx, t.ref, t.port)
		},
		MaxIdleConns:           16,
		MaxIdleConnsPerHost:    16,
		IdleConnTimeout:        portIdleConnTimeout,
		ResponseHeaderTimeout:  pc.timeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxPortHeaderBytes,
		DisableCompression:     true,
	}
}

// drop closes the Transports of sandbox id.
func (pc *portConns) drop(id sandbox.ID) {
	pc.mu.Lock()
	ports := pc.m[id]
	delete(pc.m, id)
	pc.mu.Unlock()
	for _, pt := range ports {
		pt.t.CloseIdleConnections()
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
		pt.t.CloseIdleConnections()
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
