package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandbox"
)

// The ports group: an HTTP proxy to a port inside a sandbox, a raw TCP relay over a WebSocket, and
// preview tokens (preview.go). Every connection to a port is made inside the sandbox's network
// namespace, by the provider (core.Runtime.DialPort), so none needs a network link or an egress rule;
// the proxy keeps them alive per sandbox and port (portconns.go).

// DefaultPortResponseTimeout is how long a sandbox's server may take to answer a proxied request's
// headers when Config.PortResponseTimeout is zero: a server that never ends its headers, or sends them
// a byte at a time, holds nothing longer.
const DefaultPortResponseTimeout = 60 * time.Second

// maxPortHeaderBytes bounds the headers of a sandbox's server's answer.
const maxPortHeaderBytes = 64 << 10

// proxyMethods are the methods the proxy passes on (GET's route takes HEAD too).
var proxyMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions}

// portRoutes are the ports group's operations (api/extensions.yaml).
func (s *Server) portRoutes() []route {
	if s.ports == nil {
		s.ports = s.newPortProxy()
	}
	const p = "/v1/sandboxes/{sandboxId}/ports/{port}"
	routes := []route{
		{http.MethodGet, p + "/tcp", s.relayPort},
		{http.MethodPost, p + "/preview-tokens", s.createPreviewToken},
	}
	for _, m := range proxyMethods {
		routes = append(routes, route{m, p + "/{$}", s.proxyPort}, route{m, p + "/{path...}", s.proxyPort})
	}
	return routes
}

// portTarget is one port of one sandbox generation.
type portTarget struct {
	ref  sandbox.Ref
	port int
	// since is when the sandbox's record last changed (core.Runtime.PortTarget): connections kept from
	// before are not reused.
	since time.Time
}

// portProxy passes requests on to sandboxes' ports, over kept-alive connections of one Transport per
// sandbox and port (portConns).
type portProxy struct {
	rp    *httputil.ReverseProxy
	conns *portConns
}

type proxyKey struct{}

// proxied is what a request passed on to a port needs beyond itself: where it goes, the path and
// query there, and what of it must not be passed on.
type proxied struct {
	target   portTarget
	path     string // escaped, from "/"
	rawQuery string
	strip    func(h http.Header)
}

var proxyBuffers = sync.Pool{New: func() any { return make([]byte, 32<<10) }}

type bufferPool struct{}

func (bufferPool) Get() []byte  { return proxyBuffers.Get().([]byte) }
func (bufferPool) Put(b []byte) { proxyBuffers.Put(b) } //nolint:staticcheck // a slice header is fine here

func (s *Server) newPortProxy() *portProxy {
	pp := &portProxy{conns: newPortConns(s)}
	pp.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			p := pr.In.Context().Value(proxyKey{}).(*proxied)
			pr.Out.URL = &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(p.target.port), RawQuery: p.rawQuery}
			if path, err := url.PathUnescape(p.path); err == nil {
				pr.Out.URL.Path, pr.Out.URL.RawPath = path, p.path
			} else {
				pr.Out.URL.Path = p.path
			}
			pr.SetXForwarded()
			pr.Out.Host = pr.Out.URL.Host
			if p.strip != nil {
				p.strip(pr.Out.Header)
			}
		},
		Transport:  pp.conns,
		BufferPool: bufferPool{},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client went away: nobody to answer
			}
			p := r.Context().Value(proxyKey{}).(*proxied)
			if sandbox.ClassOf(err).Err == nil {
				err = fmt.Errorf("the server on port %d of sandbox %s: %v: %w", p.target.port, p.target.ref.ID, err, sandbox.ErrPortUnreachable)
			}
			s.writeError(w, r, err)
		},
		ErrorLog: nil,
	}
	return pp
}

// serve passes r on to p's target.
func (pp *portProxy) serve(w http.ResponseWriter, r *http.Request, p *proxied) {
	pp.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), proxyKey{}, p)))
}

// apiTarget reads the sandbox and port of a request to the ports group and finds the generation they
// are of. Errors: ErrInvalidRequest, those of core.Runtime.PortTarget.
func (s *Server) apiTarget(r *http.Request) (portTarget, error) {
	port, err := sandbox.ParsePort(r.PathValue("port"))
	if err != nil {
		return portTarget{}, err
	}
	ref, since, err := s.rt.PortTarget(r.Context(), sandboxID(r))
	if err != nil {
		return portTarget{}, err
	}
	return portTarget{ref: ref, port: port, since: since}, nil
}

// proxyPort: any method of /v1/sandboxes/{sandboxId}/ports/{port}/{path...}.
func (s *Server) proxyPort(w http.ResponseWriter, r *http.Request, _ []byte) error {
	target, err := s.apiTarget(r)
	if err != nil {
		return err
	}
	if r.ContentLength != 0 {
		// A body passed on is held to the pace every body is (bodyDeadline).
		r.Body = &timedBody{ReadCloser: r.Body, rc: http.NewResponseController(w), start: time.Now(), grace: s.bodyTimeout}
	}
	s.ports.serve(w, r, &proxied{
		target:   target,
		path:     pathAfter(r.URL.EscapedPath(), 5),
		rawQuery: r.URL.RawQuery,
		// The bearer token is the daemon's, never the sandbox's.
		strip: func(h http.Header) { h.Del("Authorization") },
	})
	return nil
}

// pathAfter is the escaped path p without its first n segments, from its "/".
func pathAfter(p string, n int) string {
	for i := 0; i < n; i++ {
		j := strings.IndexByte(p[1:], '/')
		if j < 0 {
			return "/"
		}
		p = p[j+1:]
	}
	return p
}

// The raw TCP relay over a WebSocket.
const (
	tcpSubprotocol   = "sandboxd.tcp"
	tcpFrameBytes    = 256 << 10
	tcpMaxFrameBytes = 1 << 20
)

// How often the relay pings its client, and how long a ping or a write may wait; variables for the
// tests.
var (
	tcpPingInterval = atomicDuration(15 * time.Second)
	tcpWriteTimeout = atomicDuration(15 * time.Second)
)

// relayPort: GET /v1/sandboxes/{sandboxId}/ports/{port}/tcp. A request that is no WebSocket upgrade is
// the proxy's, for the sandbox's own /tcp.
func (s *Server) relayPort(w http.ResponseWriter, r *http.Request, body []byte) error {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return s.proxyPort(w, r, body)
	}
	target, err := s.apiTarget(r)
	if err != nil {
		return err
	}
	conn, err := s.rt.DialPort(r.Context(), target.ref, target.port)
	if err != nil {
		return err
	}
	defer conn.Close()
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{tcpSubprotocol},
		CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return nil // Accept has answered
	}
	ws.SetReadLimit(tcpMaxFrameBytes)
	relayTCP(context.WithoutCancel(r.Context()), ws, conn, s.done)
	return nil
}

// relayTCP copies the WebSocket's binary messages to conn and conn's bytes to the WebSocket, pings it
// every tcpPingInterval, and ends when either side ends, or done closes: with 1000 when conn ended,
// 1011 when it failed, 1001 when the server closes.
func relayTCP(ctx context.Context, ws *websocket.Conn, conn net.Conn, done <-chan struct{}) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var once sync.Once
	ended := make(chan struct{})
	finish := func(code websocket.StatusCode, reason string) {
		once.Do(func() {
			go func() {
				defer close(ended)
				_ = ws.Close(code, reason)
				_ = conn.Close()
				cancel()
			}()
		})
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // socket -> port
		defer wg.Done()
		for {
			typ, rd, err := ws.Reader(ctx)
			if err != nil {
				finish(websocket.StatusNormalClosure, "")
				return
			}
			if typ != websocket.MessageBinary {
				finish(websocket.StatusUnsupportedData, "binary messages only")
				return
			}
			if _, err := io.Copy(conn, rd); err != nil {
				finish(websocket.StatusInternalError, "the port: "+clip(err.Error()))
				return
			}
		}
	}()
	go func() { // port -> socket
		defer wg.Done()
		buf := make([]byte, tcpFrameBytes)
		for {
			n, err := conn.Read(buf)
			if n > 0 {
				wctx, wcancel := context.WithTimeout(ctx, time.Duration(tcpWriteTimeout.Load()))
				werr := ws.Write(wctx, websocket.MessageBinary, buf[:n])
				wcancel()
				if werr != nil {
					finish(websocket.StatusGoingAway, "write timed out")
					return
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					finish(websocket.StatusNormalClosure, "the port closed")
				} else {
					finish(websocket.StatusInternalError, "the port: "+clip(err.Error()))
				}
				return
			}
		}
	}()
	go func() { // heartbeats, and the server's end
		defer wg.Done()
		t := time.NewTicker(time.Duration(tcpPingInterval.Load()))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				finish(websocket.StatusGoingAway, "the server is closing")
				return
			case <-t.C:
				pctx, pcancel := context.WithTimeout(ctx, time.Duration(tcpWriteTimeout.Load()))
				err := ws.Ping(pctx)
				pcancel()
				if err != nil && ctx.Err() == nil {
					finish(websocket.StatusPolicyViolation, "no answer to a ping")
					return
				}
			}
		}
	}()
	wg.Wait()
	<-ended
}

// atomicDuration is a bound tests shorten while relays of other tests may still read it.
func atomicDuration(d time.Duration) *atomic.Int64 {
	v := new(atomic.Int64)
	v.Store(int64(d))
	return v
}
