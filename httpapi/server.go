// Package httpapi serves the sandbox runtime's HTTP contract (api.OpenAPI) over a core.Runtime.
//
// Every request goes through the same steps, in this order: the Host and, from a browser, the Origin
// (400 unless the request names a host this server serves and comes from a page of it; see hosts.go),
// route and method (unknown route 404, known path with another method 405 with an Allow header),
// authentication when Config.Tokens is set (401; GET /healthz stays open), the media type of a body (400
// unless application/json), the body limit (413), validation against the embedded OpenAPI document (400),
// strict decoding into domain types (400), the bounds on what a client stores (400; limits.go), then the
// runtime. Every error, whatever its origin, is written by one function (writeError): its class,
// sandbox.ClassOf, gives the code, and the one status table, internal/errhttp, the status; an
// unclassified error is a 500 "internal" whose detail is logged and never shown. A handler panic is a
// logged 500 too, never a dropped connection.
//
// Request bodies are limited to Config.MaxBodyBytes, DefaultMaxBodyBytes (32 MiB) unless set. Base64 grows a
// file by a third, so a file write of up to about 24 MiB less the JSON around it fits (16 MiB comfortably);
// a decoded file is never larger than sandbox.MaxFileBytes. A larger body is refused with 413
// request_too_large, before it is read when Content-Length says so. A body must arrive within
// Config.ReadBodyTimeout, plus a second for every 64 KiB of it (400 past that), so a client that sends it a
// byte at a time holds its connection that long and no longer; nothing else of a request has a deadline,
// so event streams and long commands run on.
//
// The main invariant: every response that is not a Server-Sent Events stream is a JSON document that
// matches the contract's schema for its operation and status, and every error is an ErrorResponse.
package httpapi

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/internal/jsondoc"
	"github.com/sandboxd/sandbox/internal/schema"
)

// DefaultMaxBodyBytes is the request body limit when Config.MaxBodyBytes is zero: room for a file write
// of a little under 24 MiB in base64.
const DefaultMaxBodyBytes int64 = 32 << 20

// DefaultReadBodyTimeout is Config.ReadBodyTimeout when zero. With a second more for every 64 KiB, the
// write of a 24 MiB file (32 MiB of base64) may take nine and a half minutes: about 57 KiB/s.
const DefaultReadBodyTimeout = 60 * time.Second

// DefaultHeartbeatInterval is how often an idle event stream gets a comment line when
// Config.HeartbeatInterval is zero.
const DefaultHeartbeatInterval = 15 * time.Second

// DefaultStreamWriteTimeout bounds one write to an event stream: a client that does not read for this long
// is dropped, so it never holds anything up.
const DefaultStreamWriteTimeout = 10 * time.Second

// Config configures a Server.
type Config struct {
	Runtime           *core.Runtime
	Logger            *slog.Logger  // slog.Default() if nil
	MaxBodyBytes      int64         // DefaultMaxBodyBytes if zero
	HeartbeatInterval time.Duration // DefaultHeartbeatInterval if zero
	// Tokens, when set, turns authentication on: every operation but GET /healthz needs an
	// "Authorization: Bearer <token>" header with one of them, or is answered 401 unauthenticated.
	Tokens *Tokens
	// AllowedHosts are the hosts a request may name in Host (or a browser's request in Origin) besides the
	// address the client connected to and, when that is a loopback address, localhost, 127.0.0.1 and [::1]
	// on its port: "name" on any port, or "name:port". An entry CheckAllowedHost refuses matches nothing.
	AllowedHosts []string
	// ReadBodyTimeout is how long a client may take to send a request body, plus a second for every
	// 64 KiB of it; DefaultReadBodyTimeout if zero.
	ReadBodyTimeout time.Duration
	// Schemas compiles the contract's request schemas; nil is package schema's own compiler, whose
	// validators are compiled once per process. The daemon built with -tags plainschema passes the JSON
	// Schema library's (docs/design/request-validation.md).
	Schemas schema.Compiler
	// PlainJSON parses request bodies with encoding/json instead of jsondoc's one pass
	// (docs/design/json-parser.md).
	PlainJSON bool
	// ObserveRequest, when set, is told of every answered request: its operation ("METHOD /path" as in
	// its document; "" for no route), the status, and how long the answer took (observe.go).
	ObserveRequest func(operation string, status int, d time.Duration)
	// Audit, when set, gets one line for every request that may change something: who (the token's
	// name), the operation, its sandbox and any other resource its path names, and the status
	// (observe.go).
	Audit *slog.Logger
	// Metrics, when set, is served at GET /metrics, behind the same authentication as the API.
	Metrics http.Handler
	// PortResponseTimeout is how long a sandbox's server may take to answer the headers of a request
	// the ports proxy passes on; DefaultPortResponseTimeout if zero.
	PortResponseTimeout time.Duration
	// Preview, when set, turns preview URLs on: PreviewHandler serves them, and preview tokens can be
	// made (preview.go).
	Preview *PreviewConfig
}

// Server is the HTTP handler of the API. It is safe for concurrent use.
type Server struct {
	rt           *core.Runtime
	log          *slog.Logger
	maxBody      int64
	heartbeat    time.Duration
	writeTimeout time.Duration
	tokens       *Tokens
	allowedHosts []hostPort
	bodyTimeout  time.Duration
	mux          *http.ServeMux
	handler      http.Handler
	validators   validators
	ext          *extensionDoc                     // api.Extensions, compiled
	decodeFirst  func([]byte) (any, []byte, error) // a request body's first JSON value, and what follows it

	observeRequest func(operation string, status int, d time.Duration)
	audit          *slog.Logger
	metrics        http.Handler

	terms               terminals  // the control attach of each process's terminal
	ports               *portProxy // ports.go
	portResponseTimeout time.Duration
	preview             *PreviewConfig

	// done is closed by Close and ends every event stream.
	done      chan struct{}
	closeOnce sync.Once
}

// handlerFunc is one operation. body is the request body, already limited and validated against the
// contract; nil for operations without one. A returned error is written by writeError.
type handlerFunc func(w http.ResponseWriter, r *http.Request, body []byte) error

// route is one operation of the contract or of api.Extensions.
type route struct {
	method string
	path   string // as in its document, with {sandboxId}
	h      handlerFunc
}

// New returns a server for cfg. It panics when the embedded contract does not load: that is a build
// defect, caught by every test, never a runtime condition.
func New(cfg Config) *Server {
	s := &Server{
		rt:           cfg.Runtime,
		log:          cfg.Logger,
		maxBody:      cfg.MaxBodyBytes,
		heartbeat:    cfg.HeartbeatInterval,
		tokens:       cfg.Tokens,
		bodyTimeout:  cfg.ReadBodyTimeout,
		writeTimeout: DefaultStreamWriteTimeout,
		mux:          http.NewServeMux(),
		done:         make(chan struct{}),

		observeRequest: cfg.ObserveRequest,
		audit:          cfg.Audit,
		metrics:        cfg.Metrics,

		portResponseTimeout: cfg.PortResponseTimeout,
		preview:             cfg.Preview,
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.heartbeat <= 0 {
		s.heartbeat = DefaultHeartbeatInterval
	}
	if s.bodyTimeout <= 0 {
		s.bodyTimeout = DefaultReadBodyTimeout
	}
	for _, a := range cfg.AllowedHosts {
		h, err := parseHostPort(a)
		if err != nil {
			s.log.Error("allowed host ignored", "host", a, "err", err)
			continue
		}
		s.allowedHosts = append(s.allowedHosts, h)
	}
	s.validators = contractValidators(cfg.Schemas)
	s.ext = extensionsDoc(cfg.Schemas)
	s.decodeFirst = jsondoc.DecodeFirst
	if cfg.PlainJSON {
		s.decodeFirst = stdDecodeFirst
	}
	s.routes()
	s.handler = s.recoverer(s.bodyDeadline(s.originGuard(s.mux)))
	return s
}

func (s *Server) routes() {
	const sb = "/v1/sandboxes/{sandboxId}"
	routes := []route{
		{http.MethodGet, "/healthz", s.getHealth},
		{http.MethodGet, "/v1/runtime", s.getRuntimeInfo},
		{http.MethodGet, "/v1/sandboxes", s.listSandboxes},
		{http.MethodPost, "/v1/sandboxes", s.createSandbox},
		{http.MethodGet, sb, s.getSandbox},
		{http.MethodPost, sb + "/actions/reconcile", s.reconcileSandbox},
		{http.MethodPost, sb + "/actions/pause", s.pauseSandbox},
		{http.MethodPost, sb + "/actions/resume", s.resumeSandbox},
		{http.MethodPost, sb + "/actions/terminate", s.terminateSandbox},
		{http.MethodPost, sb + "/actions/recreate", s.recreateSandbox},
		{http.MethodPost, sb + "/commands", s.executeCommand},
		{http.MethodGet, sb + "/files/content", s.readFile},
		{http.MethodPut, sb + "/files/content", s.writeFile},
		{http.MethodGet, sb + "/files/entries", s.listFiles},
		{http.MethodGet, "/v1/events", s.listEvents},
		{http.MethodGet, "/v1/events/stream", s.streamEvents},
	}
	docs := map[string]validators{} // of each route's "METHOD /path": the contract's, or api.Extensions'
	for _, rt := range routes {
		docs[rt.method+" "+rt.path] = s.validators
	}
	var wildcards []string // the prefixes of routes that end in {name...}, which take every method
	for _, rt := range s.extensionRoutes() {
		docs[rt.method+" "+rt.path] = s.ext.ops
		routes = append(routes, rt)
		if i := strings.LastIndex(rt.path, "/{"); i >= 0 && strings.HasSuffix(rt.path, "...}") {
			wildcards = append(wildcards, rt.path[:i+1])
		}
	}
	allowed := map[string][]string{}
	var paths []string
	for _, rt := range routes {
		op := docs[rt.method+" "+rt.path].operation(rt.method, docPath(rt.path))
		name := rt.method + " " + rt.path
		s.mux.Handle(name, s.observe(name, s.guard(rt.path, s.activity(rt.path, s.endpoint(op, rt.h)))))
		if _, ok := allowed[rt.path]; !ok {
			paths = append(paths, rt.path)
		}
		allowed[rt.path] = append(allowed[rt.path], rt.method)
	}
	// A pattern without a method matches only when no method pattern of the same path does: that is the
	// 405 case, answered here as an ErrorResponse instead of the mux's plain text.
	for _, p := range paths {
		if slices.ContainsFunc(wildcards, func(w string) bool { return strings.HasPrefix(p, w) && !strings.HasSuffix(p, "...}") }) {
			// A path under a wildcard route has no 405: its other methods are the wildcard's.
			continue
		}
		allow := allowed[p]
		if contains(allow, http.MethodGet) && !contains(allow, http.MethodHead) {
			allow = append(allow, http.MethodHead)
		}
		header := strings.Join(allow, ", ")
		s.mux.Handle(p, s.observe("* "+p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", header)
			s.writeError(w, r, fmt.Errorf("%s %s: allowed methods are %s: %w",
				r.Method, r.URL.Path, header, sandbox.ErrMethodNotAllowed))
		})))
	}
	s.mux.Handle("/", s.observe("unrouted", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, fmt.Errorf("no route %s: %w", r.URL.Path, sandbox.ErrNotFound))
	})))
}

// docPath is the path of a route as its document names it: a mux pattern's {name...} (the rest of the
// path) is the document's {name}, and its {$} (exactly this path) is nothing.
func docPath(pattern string) string {
	return strings.ReplaceAll(strings.ReplaceAll(pattern, "...}", "}"), "{$}", "")
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// ServeHTTP serves one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Close ends every open event stream, so that an http.Server's Shutdown does not wait on them. Other
// requests are not affected. It is safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { close(s.done) })
	if s.ports != nil {
		s.ports.conns.sweep(time.Now().Add(time.Hour))
	}
	return nil
}

// recoverer turns a handler panic into a logged 500 ErrorResponse. http.ErrAbortHandler is let through:
// it is the standard way to abort a response on purpose.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tw := &trackingWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", v,
				"stack", string(debug.Stack()))
			if tw.wrote {
				// The status is on the wire: the only honest thing left is to cut the response.
				panic(http.ErrAbortHandler)
			}
			s.writeError(tw, r, fmt.Errorf("panic: %v", v))
		}()
		next.ServeHTTP(tw, r)
	})
}

// trackingWriter remembers whether the header was written, so the recoverer knows whether it can still
// send an ErrorResponse.
type trackingWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *trackingWriter) WriteHeader(code int) {
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *trackingWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's flusher and deadlines.
func (w *trackingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
