package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/internal/errhttp"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/testenv/corestack"
)

// stubProvider is an edge fake for the tests of this package: every generation it is asked for exists at
// once and is ready. The full stack with real providers is exercised by package apitest.
type stubProvider struct {
	mu   sync.Mutex
	refs map[sandbox.Ref]bool
}

func (p *stubProvider) Manifest(context.Context) (sandbox.Manifest, error) {
	return sandbox.Manifest{Name: "stub", Version: "1", RuntimeClass: "none"}, nil
}

func (p *stubProvider) Allocate(_ context.Context, ref sandbox.Ref, _ sandbox.Spec) (sandbox.Observation, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refs[ref] = true
	return sandbox.Observation{Ref: ref, State: sandbox.ObservedReady}, nil
}

func (p *stubProvider) Observe(_ context.Context, ref sandbox.Ref) (sandbox.Observation, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.refs[ref] {
		return sandbox.Observation{Ref: ref, State: sandbox.ObservedAbsent}, nil
	}
	return sandbox.Observation{Ref: ref, State: sandbox.ObservedReady}, nil
}

func (p *stubProvider) Release(_ context.Context, ref sandbox.Ref) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.refs, ref)
	return nil
}

func (p *stubProvider) Resources(context.Context) ([]sandbox.Ref, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var refs []sandbox.Ref
	for r := range p.refs {
		refs = append(refs, r)
	}
	return refs, nil
}

// newRuntime starts a real core over a SQLite store under t.TempDir() and the stub provider.
func newRuntime(tb testing.TB) *core.Runtime {
	tb.Helper()
	return corestack.New(tb, &stubProvider{refs: map[sandbox.Ref]bool{}}).Runtime
}

// serve runs New(cfg) on a loopback test server, over a fresh runtime (newRuntime) when cfg names none,
// and closes both when the test ends, the server's event streams first.
func serve(tb testing.TB, cfg Config) (*Server, *httptest.Server) {
	tb.Helper()
	if cfg.Runtime == nil {
		cfg.Runtime = newRuntime(tb)
	}
	s := New(cfg)
	srv := httptest.NewServer(s)
	tb.Cleanup(func() {
		_ = s.Close()
		srv.Close()
	})
	return s, srv
}

// fromLoopback is r as a client on loopback sends it to 127.0.0.1:4311, for a test that calls ServeHTTP
// itself: with that Host, the connection's local address, and a JSON Content-Type on a POST or PUT.
func fromLoopback(r *http.Request) *http.Request {
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4311}
	r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, net.Addr(local)))
	r.Host = local.String()
	if (r.Method == http.MethodPost || r.Method == http.MethodPut) && r.Header.Get("Content-Type") == "" {
		r.Header.Set("Content-Type", "application/json")
	}
	return r
}

func decodeError(t testing.TB, body []byte) api.ErrorResponse {
	t.Helper()
	var er api.ErrorResponse
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&er); err != nil || er.Error.Code == "" || er.Error.Message == "" {
		t.Fatalf("not an ErrorResponse: %q (%v)", body, err)
	}
	return er
}

func TestPanicBecomesLogged500(t *testing.T) {
	var logs bytes.Buffer
	s := New(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	h := s.recoverer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("kaboom-detail") }))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/anything")
	if err != nil {
		t.Fatalf("the connection was dropped: %v", err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	er := decodeError(t, body.Bytes())
	if resp.StatusCode != 500 || er.Error.Code != sandbox.CodeInternal || strings.Contains(body.String(), "kaboom") {
		t.Fatalf("panic answered %d %+v", resp.StatusCode, er)
	}
	if !strings.Contains(logs.String(), "kaboom-detail") {
		t.Fatalf("the panic was not logged: %s", logs.String())
	}
}

func TestErrorTable(t *testing.T) {
	var logs bytes.Buffer
	s := New(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for _, c := range sandbox.ErrorClasses {
		w := httptest.NewRecorder()
		s.writeError(w, httptest.NewRequest("GET", "/", nil), fmt.Errorf("doing a thing: %w", c.Err))
		er := decodeError(t, w.Body.Bytes())
		if w.Code != errhttp.Status(c.Code) || er.Error.Code != c.Code || !errors.Is(sandbox.ErrorForCode(er.Error.Code), c.Err) {
			t.Errorf("%v: %d %s, want %d %s", c.Err, w.Code, er.Error.Code, errhttp.Status(c.Code), c.Code)
		}
	}
	w := httptest.NewRecorder()
	s.writeError(w, httptest.NewRequest("GET", "/", nil), errors.New("disk on fire at /secret/path"))
	er := decodeError(t, w.Body.Bytes())
	if w.Code != 500 || er.Error.Code != sandbox.CodeInternal || strings.Contains(w.Body.String(), "secret") {
		t.Fatalf("unclassified error answered %d %s", w.Code, w.Body.String())
	}
	if !strings.Contains(logs.String(), "/secret/path") {
		t.Fatalf("the detail of an internal error was not logged: %s", logs.String())
	}
}

func TestCommandDefaults(t *testing.T) {
	// Left out, they are zero, which the runtime's normaliser fills with the defaults.
	cmd, err := command(api.CommandRequest{Argv: []string{"true"}})
	if err == nil {
		cmd, err = cmd.Normalize()
	}
	if err != nil || cmd.Timeout != sandbox.DefaultCommandTimeout || cmd.MaxOutputBytes != sandbox.DefaultMaxOutputBytes {
		t.Fatalf("defaults: %+v %v", cmd, err)
	}
	tiny, big, n := 1e-12, 3600.0, 7
	cmd, err = command(api.CommandRequest{Argv: []string{"true"}, TimeoutSeconds: &tiny, MaxOutputBytes: &n})
	if err != nil || cmd.Timeout <= 0 || cmd.MaxOutputBytes != 7 {
		t.Fatalf("tiny timeout: %+v %v", cmd, err)
	}
	if cmd, err = command(api.CommandRequest{Argv: []string{"true"}, TimeoutSeconds: &big}); err != nil || cmd.Timeout != time.Hour {
		t.Fatalf("hour: %+v %v", cmd, err)
	}
	for _, bad := range []float64{0, -1, 3600.001} {
		if _, err := command(api.CommandRequest{TimeoutSeconds: &bad}); !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Errorf("timeout %v: %v", bad, err)
		}
	}
}

func TestCloseEndsStreams(t *testing.T) {
	testenv.NoLeaks(t)
	s, srv := serve(t, Config{HeartbeatInterval: time.Hour})
	resp, err := http.Get(srv.URL + "/v1/events/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream answered %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	_ = s.Close()
	var rest bytes.Buffer
	if _, err := rest.ReadFrom(resp.Body); err != nil {
		t.Fatalf("the stream did not end cleanly: %v", err)
	}
	if rest.String() != ": stream\n\n" {
		t.Fatalf("an empty log streamed %q", rest.String())
	}
}

// fuzzCheck fails unless the response is a success or a 4xx ErrorResponse.
func fuzzCheck(t *testing.T, what string, status int, body []byte) {
	t.Helper()
	if status >= 500 {
		t.Fatalf("%s: %d %s", what, status, body)
	}
	if status >= 400 {
		decodeError(t, body)
	}
}

func FuzzCreateBody(f *testing.F) {
	for _, seed := range []string{
		`{"clientRequestId":"a"}`,
		`{"clientRequestId":"a","image":"x","template":"y"}`,
		`{"clientRequestId":"a","resources":{"cpuMillis":1,"memoryMiB":2,"diskMiB":3}}`,
		`{"clientRequestId":"a","requiredCapabilities":["fileAccess","fileAccess"]}`,
		`{"clientRequestId":"a","extensions":{"acme.x":{"deep":[1,2,{"a":null}]}}}`,
		`{"clientRequestId":"\u0000","image":"\ud800"}`,
		`{"clientRequestId":"a","resources":{"cpuMillis":1e400}}`,
		`{"clientRequestId":"a"} trailing`,
		`[`, `null`, `""`, ``,
	} {
		f.Add([]byte(seed))
	}
	s := New(Config{Runtime: newRuntime(f), Logger: slog.New(slog.DiscardHandler)})
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		r := fromLoopback(httptest.NewRequest("POST", "/v1/sandboxes", bytes.NewReader(body)))
		s.ServeHTTP(w, r)
		fuzzCheck(t, string(body), w.Code, w.Body.Bytes())
		if w.Code/100 == 2 && w.Code != 201 {
			t.Fatalf("create answered %d", w.Code)
		}
	})
}

func FuzzCommandBody(f *testing.F) {
	for _, seed := range []string{
		`{"expectedGeneration":1,"argv":["true"]}`,
		`{"expectedGeneration":1,"argv":["true"],"timeoutSeconds":1e-300,"maxOutputBytes":1}`,
		`{"expectedGeneration":9223372036854775807,"argv":["x"],"env":{"A":"B"},"cwd":"/"}`,
		`{"expectedGeneration":1.0,"argv":["true"]}`,
		`{"expectedGeneration":1,"argv":["true"],"timeoutSeconds":3600}`,
	} {
		f.Add([]byte(seed))
	}
	rt := newRuntime(f)
	s := New(Config{Runtime: rt, Logger: slog.New(slog.DiscardHandler)})
	// The stub provider runs no commands: a valid request reaches the runtime and is refused there (422),
	// which is what this target checks; commands themselves are apitest's.
	sb, err := rt.Create(context.Background(), sandbox.Spec{ClientRequestID: "fuzz"})
	if err != nil {
		f.Fatal(err)
	}
	path := "/v1/sandboxes/" + string(sb.ID) + "/commands"
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, fromLoopback(httptest.NewRequest("POST", path, bytes.NewReader(body))))
		fuzzCheck(t, string(body), w.Code, w.Body.Bytes())
	})
}

func FuzzQueryCursor(f *testing.F) {
	for _, seed := range [][2]string{{"0", ""}, {"-1", ""}, {"1.5", "x"}, {"99999999999999999999", "3"}, {"", "-7"}, {"%zz", " 5 "}, {"1&after=2", "0"}} {
		f.Add(seed[0], seed[1])
	}
	s, srv := serve(f, Config{Logger: slog.New(slog.DiscardHandler)})
	f.Fuzz(func(t *testing.T, after, lastEventID string) {
		// Requests are built with http.NewRequest, which refuses what no client could send (httptest's
		// panics on it): the server is under test here, not URL parsing.
		if list, err := http.NewRequest("GET", "/v1/events?after="+after, nil); err == nil {
			w := httptest.NewRecorder()
			s.ServeHTTP(w, fromLoopback(list))
			fuzzCheck(t, after, w.Code, w.Body.Bytes())
		}

		// The stream, over a real connection, given up once the status is known.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/events/stream?after="+url.QueryEscape(after), nil)
		if err != nil {
			return // not a URL a client could send
		}
		if lastEventID != "" && !strings.ContainsAny(lastEventID, "\r\n\x00") {
			req.Header.Set("Last-Event-ID", lastEventID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return // refused by the client's own header checks
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			fuzzCheck(t, after+" "+lastEventID, resp.StatusCode, body.Bytes())
		}
	})
}
