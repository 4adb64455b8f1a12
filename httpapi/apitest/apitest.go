// Package apitest is the HTTP conformance suite of sandboxd: Run starts the real stack (core over a SQLite
// store under t.TempDir(), the given provider, httpapi; testenv/stack wires them) on a real listener at
// 127.0.0.1:0 and drives every path and every documented status of the contract through a real HTTP
// client.
//
// Its invariant: every response the suite receives is checked against the contract. A test-only
// RoundTripper validates each response with openapi3filter.ValidateResponse for its operation (statuses the
// operation does not document, like 405 or 413, must be an ErrorResponse), and the suite fails at the end
// when a documented (operation, status) pair was never seen, unless it is listed in unreachable with why.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/httpapi"
	"github.com/sandboxd/sandbox/internal/errhttp"
	teststack "github.com/sandboxd/sandbox/internal/testenv/stack"
	"github.com/sandboxd/sandbox/store/sqlite"
)

// unreachable lists documented (operation, status) pairs no request can produce, with the reason.
var unreachable = map[string]string{
	"reconcileSandbox 400": "reconcile takes no body and no query; its only parameter is a non-empty path segment",
	"terminateSandbox 502": "terminate always succeeds: the runtime retries a failing provider clean-up by itself (semantics.md)",
	"terminateSandbox 503": "terminate always succeeds: the runtime retries a failing provider clean-up by itself (semantics.md)",
}

// Run runs the suite against providers made by newProvider; each call must return a fresh provider whose
// resources are released when t ends. Every stack of the suite is wired with opts (a plain path of the
// store or the API, say), then the suite's own settings.
func Run(t *testing.T, newProvider func(t *testing.T) sandbox.Provider, opts ...teststack.Option) {
	cov := newCoverage(t)
	s := &suite{newProvider: newProvider, cov: cov, opts: opts}
	t.Run("Health", s.testHealth)
	t.Run("Routing", s.testRouting)
	t.Run("BodyLimit", s.testBodyLimit)
	t.Run("Create", s.testCreate)
	t.Run("CreateValidation", s.testCreateValidation)
	t.Run("CreateUnsupported", s.testCreateUnsupported)
	t.Run("GetList", s.testGetList)
	t.Run("Actions", s.testActions)
	t.Run("PauseResume", s.testPauseResume)
	t.Run("PauseUnsupported", s.testPauseUnsupported)
	t.Run("Recreate", s.testRecreate)
	t.Run("Reconcile", s.testReconcile)
	t.Run("Commands", s.testCommands)
	t.Run("Files", s.testFiles)
	t.Run("FileConfinement", s.testFileConfinement)
	t.Run("LargeFile", s.testLargeFile)
	t.Run("DataPlaneUnsupported", s.testDataPlaneUnsupported)
	t.Run("Events", s.testEvents)
	t.Run("EventHistory", s.testEventHistory)
	t.Run("Stream", s.testStream)
	t.Run("StreamHeartbeat", s.testStreamHeartbeat)
	t.Run("StreamHistory", s.testStreamHistory)
	t.Run("ProviderUnavailable", s.testProviderUnavailable)
	t.Run("ProviderProtocol", s.testProviderProtocol)
	if !t.Failed() {
		cov.check(t)
	}
}

type suite struct {
	newProvider func(t *testing.T) sandbox.Provider
	cov         *coverage
	opts        []teststack.Option
}

// options adjust one stack.
type options struct {
	retention    int           // store event retention; 0 for the store's default
	heartbeat    time.Duration // SSE heartbeat; 0 for the server's default
	maxBodyBytes int64         // 0 for the server's default
}

// stack is one running server over a real runtime.
type stack struct {
	t    *testing.T
	rt   *core.Runtime
	base string
	c    *client
}

// newStack starts core, store and server for prov on 127.0.0.1:0, with the suite's stack options and
// then o's, and stops them when t ends.
func (s *suite) newStack(t *testing.T, prov sandbox.Provider, o options) *stack {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	opts := append(slices.Clone(s.opts),
		teststack.StoreConfig(func(c *sqlite.Config) { c.Retention = o.retention }),
		teststack.Core(func(c *core.Config) { c.Logger = logger }),
		teststack.API(func(c *httpapi.Config) {
			c.Logger, c.HeartbeatInterval, c.MaxBodyBytes = logger, o.heartbeat, o.maxBodyBytes
		}))
	w := teststack.New(t, prov, opts...)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c := &client{t: t, base: w.URL, hc: &http.Client{Transport: &validatingTransport{t: t, next: tr, cov: s.cov}}}
	return &stack{t: t, rt: w.Runtime, base: w.URL, c: c}
}

// client is a JSON client whose every response is validated against the contract.
type client struct {
	t    *testing.T
	base string
	hc   *http.Client
}

// response is a received response, its body read.
type response struct {
	status int
	header http.Header
	body   []byte
}

// raw sends a request with a body as given and returns the response.
func (c *client) raw(method, path string, body io.Reader, header http.Header) response {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// send sends v as JSON (a string or []byte is sent as it is; nil sends no body).
func (c *client) send(method, path string, v any) response {
	c.t.Helper()
	var body io.Reader
	switch b := v.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
	case []byte:
		body = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(v)
		if err != nil {
			c.t.Fatalf("marshal: %v", err)
		}
		body = bytes.NewReader(raw)
	}
	return c.raw(method, path, body, nil)
}

// ok sends a request that must answer status, and decodes the body into out (when not nil).
func (c *client) ok(method, path string, in any, status int, out any) {
	c.t.Helper()
	r := c.send(method, path, in)
	if r.status != status {
		c.t.Fatalf("%s %s: status %d, want %d: %s", method, path, r.status, status, r.body)
	}
	if out != nil {
		if err := json.Unmarshal(r.body, out); err != nil {
			c.t.Fatalf("%s %s: decoding %s: %v", method, path, r.body, err)
		}
	}
}

// fails sends a request that must fail with status and code; it returns the error message.
func (c *client) fails(method, path string, in any, status int, code sandbox.ErrorCode) string {
	c.t.Helper()
	return c.checkError(method, path, c.send(method, path, in), status, code)
}

func (c *client) checkError(method, path string, r response, status int, code sandbox.ErrorCode) string {
	c.t.Helper()
	var er api.ErrorResponse
	if err := json.Unmarshal(r.body, &er); err != nil {
		c.t.Fatalf("%s %s: status %d, body %q is not an ErrorResponse: %v", method, path, r.status, r.body, err)
	}
	if r.status != status || er.Error.Code != code {
		c.t.Fatalf("%s %s: %d %s (%s), want %d %s", method, path, r.status, er.Error.Code, er.Error.Message, status, code)
	}
	// The code maps back to the error class the status came from.
	if st := errhttp.StatusOf(sandbox.ErrorForCode(code)); st != status && code != sandbox.CodeInternal {
		c.t.Fatalf("code %s has status %d in the status table, got %d", code, st, status)
	}
	if er.Error.Message == "" {
		c.t.Fatalf("%s %s: empty error message", method, path)
	}
	return er.Error.Message
}

// contract is the embedded OpenAPI document, loaded once.
var contract = sync.OnceValues(func() (*openapi3.T, error) { return load(api.OpenAPI) })

// extensions is api/extensions.yaml, loaded once.
var extensions = sync.OnceValues(func() (*openapi3.T, error) { return load(api.Extensions) })

func load(src []byte) (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(src)
	if err != nil {
		return nil, err
	}
	return doc, doc.Validate(context.Background())
}

// findRoute matches a request path against the contract's path templates, then against those of
// api/extensions.yaml; doc is the document that has it (the contract when neither does).
func findRoute(method, path string) (doc *openapi3.T, route *routers.Route, params map[string]string, err error) {
	for _, load := range []func() (*openapi3.T, error){contract, extensions} {
		d, err := load()
		if err != nil {
			return nil, nil, nil, err
		}
		if doc == nil {
			doc = d
		}
		if route, params, ok := matchRoute(d, method, path); ok {
			return d, route, params, nil
		}
	}
	return doc, nil, nil, nil
}

// matchRoute matches a request path against one document's path templates; ok is true when a
// template matches, and route is nil then when it has no operation for method. The template with the
// most literal segments wins, so /v1/images/prune is not /v1/images/{ref}.
func matchRoute(doc *openapi3.T, method, path string) (route *routers.Route, params map[string]string, ok bool) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	best := -1
	for tmpl, item := range doc.Paths.Map() {
		tsegs := strings.Split(strings.Trim(tmpl, "/"), "/")
		if len(tsegs) != len(segs) {
			continue
		}
		p := map[string]string{}
		literal := 0
		match := true
		for i, ts := range tsegs {
			switch {
			case strings.HasPrefix(ts, "{") && strings.HasSuffix(ts, "}"):
				p[ts[1:len(ts)-1]] = segs[i]
			case ts == segs[i]:
				literal++
			default:
				match = false
			}
			if !match {
				break
			}
		}
		if !match || literal <= best {
			continue
		}
		best, ok, params, route = literal, true, p, nil
		if op := item.GetOperation(method); op != nil {
			route = &routers.Route{Spec: doc, Path: tmpl, PathItem: item, Method: method, Operation: op}
		}
	}
	return route, params, ok
}

// Transport returns a RoundTripper over next that checks every response against the contract or, for
// an operation of api/extensions.yaml, against that document, as the suite does: a documented status
// with a body of its schema, any error an ErrorResponse, a stream or a body of bytes only where the
// operation documents that media type. Feature tests of extension endpoints send their requests
// through it.
func Transport(t *testing.T, next http.RoundTripper) http.RoundTripper {
	return &validatingTransport{t: t, next: next}
}

// validatingTransport checks every response against its document and records its (operation, status)
// when cov is set.
type validatingTransport struct {
	t    *testing.T
	next http.RoundTripper
	cov  *coverage // nil: nothing recorded
}

func (v *validatingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := v.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	doc, route, params, err := findRoute(req.Method, req.URL.Path)
	if err != nil {
		v.t.Errorf("API documents: %v", err)
		return resp, nil
	}
	ct := resp.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	if resp.StatusCode == http.StatusSwitchingProtocols || (mt != "" && mt != "application/json") {
		// A stream (events, a WebSocket) or a body of bytes: its documented media type is all there is
		// to check here; a stream's events are validated one by one as they are read (readSSE).
		if !documentsMedia(route, resp.StatusCode, mt) {
			v.t.Errorf("%s %s: status %d with Content-Type %q is not documented", req.Method, req.URL.Path, resp.StatusCode, ct)
		}
		v.cov.saw(route, resp.StatusCode)
		return resp, nil
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if resp.StatusCode == http.StatusNoContent {
		if route == nil || route.Operation.Responses.Status(http.StatusNoContent) == nil || len(body) > 0 || ct != "" {
			v.t.Errorf("%s %s: 204 not documented, or with a body (%q, %d bytes)", req.Method, req.URL.Path, ct, len(body))
		}
		v.cov.saw(route, resp.StatusCode)
		return resp, nil
	}
	if ct != "application/json" && !(req.Method == http.MethodHead && ct == "") {
		v.t.Errorf("%s %s: Content-Type %q, want application/json", req.Method, req.URL.Path, ct)
	}
	documented := route != nil && route.Operation.Responses.Status(resp.StatusCode) != nil
	if !documented {
		// 404 of an unknown route, 405, 413, 500 and a 400 where the operation documents none: the body
		// must still be an ErrorResponse.
		if resp.StatusCode < 400 {
			v.t.Errorf("%s %s: status %d is not documented", req.Method, req.URL.Path, resp.StatusCode)
		}
		if err := validateSchema(doc, "ErrorResponse", body); err != nil {
			v.t.Errorf("%s %s: %d body is not an ErrorResponse: %v\n%s", req.Method, req.URL.Path, resp.StatusCode, err, body)
		}
		v.cov.saw(route, resp.StatusCode)
		return resp, nil
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true},
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(req.Context(), in); err != nil {
		v.t.Errorf("%s %s: %d response does not match the contract: %v\n%s", req.Method, req.URL.Path, resp.StatusCode, err, body)
	}
	if resp.StatusCode >= 400 {
		if err := validateSchema(doc, "ErrorResponse", body); err != nil {
			v.t.Errorf("%s %s: %d body is not an ErrorResponse: %v", req.Method, req.URL.Path, resp.StatusCode, err)
		}
	}
	v.cov.saw(route, resp.StatusCode)
	return resp, nil
}

// validateSchema checks a JSON document against one of the contract's component schemas.
func validateSchema(doc *openapi3.T, name string, body []byte) error {
	ref := doc.Components.Schemas[name]
	if ref == nil {
		return fmt.Errorf("no schema %s", name)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return err
	}
	return ref.Value.VisitJSON(v, openapi3.EnableJSONSchema2020())
}

// documentsMedia reports whether route's operation documents a response of status with media type
// mt; a 101 switch of protocols needs only its status.
func documentsMedia(route *routers.Route, status int, mt string) bool {
	if route == nil {
		return false
	}
	r := route.Operation.Responses.Status(status)
	if r == nil {
		return false
	}
	if status == http.StatusSwitchingProtocols {
		return true
	}
	_, ok := r.Value.Content[mt]
	return ok
}

// coverage records which documented (operation, status) pairs the suite has seen.
type coverage struct {
	mu      sync.Mutex
	seen    map[string]bool
	noPause bool // the provider lacks pauseResume: pause and resume can only be refused
}

func newCoverage(t *testing.T) *coverage { return &coverage{seen: map[string]bool{}} }

func (c *coverage) saw(route *routers.Route, status int) {
	if c == nil || route == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[fmt.Sprintf("%s %d", route.Operation.OperationID, status)] = true
}

// check fails t for every documented (operation, status) pair never seen and not listed as unreachable.
func (c *coverage) check(t *testing.T) {
	doc, err := contract()
	if err != nil {
		t.Fatalf("contract: %v", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var missing []string
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for status := range op.Responses.Map() {
				key := op.OperationID + " " + status
				if c.noPause && (op.OperationID == "pauseSandbox" || op.OperationID == "resumeSandbox") {
					continue // a provider without pauseResume only ever refuses them (422), which Actions checks
				}
				if !c.seen[key] && unreachable[key] == "" {
					missing = append(missing, key)
				}
			}
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("documented responses the suite never produced:\n  %s", strings.Join(missing, "\n  "))
	}
}

// waitState polls a sandbox until it is in want (or fails the test after a generous bound: this is a
// liveness guard, not a timing assertion).
func (st *stack) waitState(id sandbox.ID, want sandbox.State) *sandbox.Sandbox {
	st.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var sb sandbox.Sandbox
		st.c.ok("GET", "/v1/sandboxes/"+string(id), nil, 200, &sb)
		if sb.State == want {
			return &sb
		}
		if time.Now().After(deadline) {
			st.t.Fatalf("sandbox %s is %s, waited for %s", id, sb.State, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// create makes a sandbox with a fresh clientRequestId and waits until it is ready.
func (st *stack) create(extra map[string]any) *sandbox.Sandbox {
	st.t.Helper()
	spec := map[string]any{"clientRequestId": string(sandbox.NewID())}
	for k, v := range extra {
		spec[k] = v
	}
	var sb sandbox.Sandbox
	st.c.ok("POST", "/v1/sandboxes", spec, 201, &sb)
	return st.waitState(sb.ID, sandbox.StateReady)
}

func sbPath(id sandbox.ID, rest string) string { return "/v1/sandboxes/" + string(id) + rest }

func gen(g sandbox.Generation) map[string]any { return map[string]any{"expectedGeneration": g} }
