package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/fastpath"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// newClient is a client of base with quick retries, on connections of its own that are closed when the
// test ends.
func newClient(t *testing.T, base string, opts ...client.Option) *client.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c, err := client.New(base, append([]client.Option{client.WithHTTPClient(&http.Client{Transport: tr}),
		client.WithRetry(4, time.Millisecond, 10*time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ready creates a sandbox and waits until it is ready.
func ready(t *testing.T, c *client.Client) *sandbox.Sandbox {
	t.Helper()
	ctx := t.Context()
	sb, err := c.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	sb, err = c.WaitReady(ctx, sb.ID)
	if err != nil {
		t.Fatalf("wait ready: %v", err)
	}
	return sb
}

func TestNewRejectsBadURL(t *testing.T) {
	for _, u := range []string{"ftp://x", "127.0.0.1:4311", "http://"} {
		if _, err := client.New(u); !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Errorf("New(%q) = %v, want ErrInvalidRequest", u, err)
		}
	}
	c, err := client.New("")
	if err != nil || c.BaseURL() != client.DefaultURL {
		t.Errorf("New(\"\") = %v, %v; want the default URL", c, err)
	}
}

func TestHealthAndRuntime(t *testing.T) {
	c := newClient(t, newDaemon(t, 0))
	if err := c.Health(t.Context()); err != nil {
		t.Fatalf("health: %v", err)
	}
	info, err := c.Runtime(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.ProtocolVersion != sandbox.ProtocolVersion || info.Provider.Name == "" || !info.Provider.Capabilities.Has(sandbox.CapCommandExecution) {
		t.Errorf("runtime info %+v", info)
	}
}

func TestLifecycle(t *testing.T) {
	c := newClient(t, newDaemon(t, 0))
	ctx := t.Context()
	spec := sandbox.Spec{ClientRequestID: "lifecycle-1", Resources: &sandbox.Resources{CPUMillis: 500}}
	sb, err := c.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Create(ctx, spec)
	if err != nil || again.ID != sb.ID {
		t.Fatalf("repeated create = %v, %v; want the same sandbox %s", again, err, sb.ID)
	}
	if sb, err = c.WaitReady(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, sb.ID)
	if err != nil || got.ID != sb.ID || got.Spec.Resources.CPUMillis != 500 {
		t.Fatalf("get = %+v, %v", got, err)
	}
	list, err := c.List(ctx)
	if err != nil || !slices.ContainsFunc(list, func(s *sandbox.Sandbox) bool { return s.ID == sb.ID }) {
		t.Fatalf("list = %v, %v; want it to hold %s", list, err, sb.ID)
	}

	if _, err := c.Pause(ctx, sb.ID, sb.Generation); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitState(ctx, sb.ID, sandbox.StatePaused); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Resume(ctx, sb.ID, sb.Generation); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if rec, err := c.Reconcile(ctx, sb.ID); err != nil || rec.State != sandbox.StateReady {
		t.Fatalf("reconcile = %v, %v", rec, err)
	}
	if _, err := c.Terminate(ctx, sb.ID, sb.Generation); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitState(ctx, sb.ID, sandbox.StateTerminated); err != nil {
		t.Fatal(err)
	}
	re, err := c.Recreate(ctx, sb.ID, sb.Generation, sandbox.Spec{})
	if err != nil || re.Generation != sb.Generation+1 || re.Spec.ClientRequestID == "" {
		t.Fatalf("recreate = %+v, %v; want generation %d", re, err, sb.Generation+1)
	}
	if _, err := c.WaitReady(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
}

func TestErrorClasses(t *testing.T) {
	c := newClient(t, newDaemon(t, 0))
	ctx := t.Context()
	sb := ready(t, c)

	_, err := c.Get(ctx, "sbx_nosuchsandbox")
	var apiErr *client.Error
	if !errors.Is(err, sandbox.ErrNotFound) || !errors.As(err, &apiErr) || apiErr.Code != sandbox.CodeNotFound || apiErr.Status != 404 || apiErr.Message == "" {
		t.Errorf("get unknown: %v (%#v)", err, apiErr)
	}
	if _, err := c.Pause(ctx, sb.ID, sb.Generation+1); !errors.Is(err, sandbox.ErrGenerationConflict) {
		t.Errorf("stale pause: %v, want ErrGenerationConflict", err)
	}
	if _, err := c.Recreate(ctx, sb.ID, sb.Generation, sandbox.Spec{}); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Errorf("recreate of a ready sandbox: %v, want ErrInvalidState", err)
	}
	if _, err := c.Create(ctx, sandbox.Spec{ClientRequestID: sb.Spec.ClientRequestID, Template: "other"}); !errors.Is(err, sandbox.ErrIdempotencyConflict) && !errors.Is(err, sandbox.ErrUnsupportedCapability) {
		t.Errorf("create with a reused request id: %v", err)
	}
	if _, err := c.Create(ctx, sandbox.Spec{ClientRequestID: sb.Spec.ClientRequestID, Resources: &sandbox.Resources{MemoryMiB: 64}}); !errors.Is(err, sandbox.ErrIdempotencyConflict) {
		t.Errorf("create with a reused request id and another spec: %v, want ErrIdempotencyConflict", err)
	}
	if _, err := c.Create(ctx, sandbox.Spec{Image: "alpine"}); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
		t.Errorf("create with an image on the host provider: %v, want ErrUnsupportedCapability", err)
	}
	if _, err := c.Exec(ctx, sb.ID, sb.Generation, sandbox.Command{}); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Errorf("exec without argv: %v, want ErrInvalidRequest", err)
	}
	if _, err := c.ReadFile(ctx, sb.ID, sb.Generation, "missing.txt"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("read a missing file: %v, want ErrNotFound", err)
	}
	if _, err := c.WaitState(ctx, sb.ID, sandbox.StatePaused); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Errorf("wait for paused on a ready sandbox: %v, want a StateError", err)
	}
}

func TestExec(t *testing.T) {
	c := newClient(t, newDaemon(t, 0))
	ctx := t.Context()
	sb := ready(t, c)
	res, err := c.Exec(ctx, sb.ID, sb.Generation, sandbox.Command{
		Argv: []string{"sh", "-c", `echo "$GREETING"; echo oops >&2; exit 3`},
		Env:  map[string]string{"GREETING": "hello"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode == nil || *res.ExitCode != 3 || res.Stdout != "hello\n" || res.Stderr != "oops\n" {
		t.Errorf("result %+v", res)
	}
	res, err = c.Exec(ctx, sb.ID, sb.Generation, sandbox.Command{Argv: []string{"sleep", "30"}, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.ExitCode != nil {
		t.Errorf("timed-out result %+v", res)
	}
}

func TestFiles(t *testing.T) {
	c := newClient(t, newDaemon(t, 0))
	ctx := t.Context()
	sb := ready(t, c)
	data := []byte("line one\nline two\n")
	n, err := c.WriteFile(ctx, sb.ID, sb.Generation, "dir/sub/notes.txt", data)
	if err != nil || n != int64(len(data)) {
		t.Fatalf("write = %d, %v", n, err)
	}
	got, err := c.ReadFile(ctx, sb.ID, sb.Generation, "dir/sub/notes.txt")
	if err != nil || string(got) != string(data) {
		t.Fatalf("read = %q, %v", got, err)
	}
	entries, err := c.ListFiles(ctx, sb.ID, sb.Generation, "dir")
	if err != nil || len(entries) != 1 || entries[0].Kind != sandbox.KindDirectory {
		t.Fatalf("list dir = %+v, %v", entries, err)
	}
	entries, err = c.ListFiles(ctx, sb.ID, sb.Generation, entries[0].Path)
	if err != nil || len(entries) != 1 || entries[0].Kind != sandbox.KindFile || entries[0].Size != int64(len(data)) {
		t.Fatalf("list sub = %+v, %v", entries, err)
	}
	if _, err := c.ListFiles(ctx, sb.ID, sb.Generation, ""); err != nil {
		t.Fatalf("list the working directory: %v", err)
	}
}

func TestEventsList(t *testing.T) {
	c := newClient(t, newDaemon(t, 0))
	ctx := t.Context()
	sb := ready(t, c)
	ready(t, c)
	evs, err := c.Events(ctx, sandbox.EventQuery{SandboxID: sb.ID})
	if err != nil || len(evs) == 0 || evs[0].Type != sandbox.EventCreated {
		t.Fatalf("events = %+v, %v", evs, err)
	}
	for _, ev := range evs {
		if ev.SandboxID != sb.ID {
			t.Errorf("event %d of %s in a list filtered to %s", ev.Cursor, ev.SandboxID, sb.ID)
		}
	}
	rest, err := c.Events(ctx, sandbox.EventQuery{After: evs[0].Cursor, SandboxID: sb.ID})
	if err != nil || len(rest) != len(evs)-1 {
		t.Fatalf("events after %d = %d, %v; want %d", evs[0].Cursor, len(rest), err, len(evs)-1)
	}
}

func TestEventHistoryUnavailable(t *testing.T) {
	testenv.NoLeaks(t) // the refused stream leaves nothing running, in the client or the daemon
	c := newClient(t, newDaemon(t, 1))
	ctx := t.Context()
	ready(t, c)
	_, err := c.Events(ctx, sandbox.EventQuery{})
	if !errors.Is(err, sandbox.ErrEventHistoryUnavailable) {
		t.Fatalf("list after 0 with a history of 1: %v, want ErrEventHistoryUnavailable", err)
	}
	var n int
	for _, err := range c.Stream(ctx, sandbox.EventQuery{}) {
		n++
		if !errors.Is(err, sandbox.ErrEventHistoryUnavailable) {
			t.Fatalf("stream after 0 with a history of 1: %v, want ErrEventHistoryUnavailable", err)
		}
	}
	if n != 1 {
		t.Errorf("stream yielded %d times, want once with the error", n)
	}
}

// TestStreamResume cuts the connection under a live stream and checks the stream resumes where it was,
// with no event lost or repeated, and that neither the streams nor the daemon's handlers of them
// outlive the test.
func TestStreamResume(t *testing.T) {
	testenv.NoLeaks(t)
	base := newDaemon(t, 0)
	direct := newClient(t, base)
	u, _ := url.Parse(base)
	proxy := newCutProxy(t, u.Host)
	c := newClient(t, proxy.URL(), client.WithRetry(20, time.Millisecond, 50*time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	first := ready(t, direct)
	var got []int64
	var second *sandbox.Sandbox
	for ev, err := range c.Stream(ctx, sandbox.EventQuery{}) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		got = append(got, ev.Cursor)
		if second == nil && ev.SandboxID == first.ID && isReady(ev) {
			if proxy.cut() == 0 {
				t.Fatal("no connection to cut")
			}
			second = ready(t, direct)
			continue
		}
		if second != nil && ev.SandboxID == second.ID && isReady(ev) {
			break
		}
	}
	var want []int64
	evs, err := direct.Events(ctx, sandbox.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		want = append(want, ev.Cursor)
		if ev.SandboxID == second.ID && isReady(ev) {
			break
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("streamed cursors %v, the log holds %v", got, want)
	}
}

// isReady reports whether ev is a state change to ready.
func isReady(ev sandbox.Event) bool {
	var d sandbox.StateChangedData
	return ev.Type == sandbox.EventStateChanged && json.Unmarshal(ev.Data, &d) == nil && d.To == sandbox.StateReady
}

// TestRetries checks that reads and creates are retried past a 503 and that a command is not.
func TestRetries(t *testing.T) {
	target, _ := url.Parse(newDaemon(t, 0))
	rp := httputil.NewSingleHostReverseProxy(target)
	var fail atomic.Int32
	var seen atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		if fail.Add(-1) >= 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":{"code":"provider_unavailable","message":"injected"}}`))
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer front.Close()
	c := newClient(t, front.URL)
	ctx := t.Context()

	fail.Store(2)
	sb, err := c.Create(ctx, sandbox.Spec{})
	if err != nil || seen.Load() != 3 {
		t.Fatalf("create through two 503s = %v after %d requests; want success after 3", err, seen.Load())
	}
	if _, err := c.WaitReady(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	fail.Store(1)
	seen.Store(0)
	if _, err := c.Get(ctx, sb.ID); err != nil || seen.Load() != 2 {
		t.Fatalf("get through one 503 = %v after %d requests", err, seen.Load())
	}
	fail.Store(1)
	seen.Store(0)
	_, err = c.Exec(ctx, sb.ID, sb.Generation, sandbox.Command{Argv: []string{"true"}})
	if !errors.Is(err, sandbox.ErrProviderUnavailable) || seen.Load() != 1 {
		t.Fatalf("exec through a 503 = %v after %d requests; want the 503 after one", err, seen.Load())
	}
	fail.Store(100)
	if _, err := c.List(ctx); !errors.Is(err, sandbox.ErrProviderUnavailable) {
		t.Fatalf("list past every retry = %v, want ErrProviderUnavailable", err)
	}
}

func TestBearerToken(t *testing.T) {
	var auth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"status":"ok"}`))
	}))
	defer srv.Close()
	if err := newClient(t, srv.URL, client.WithToken("s3cret")).Health(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := auth.Load(); got != "Bearer s3cret" {
		t.Errorf("Authorization %q, want the bearer token", got)
	}
}

func TestNonContractError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "teapot", http.StatusTeapot)
	}))
	defer srv.Close()
	err := newClient(t, srv.URL).Health(t.Context())
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusTeapot || apiErr.Code != sandbox.CodeInternal {
		t.Fatalf("error %v, want an internal *Error with the status", err)
	}
}

// TestPlainJSONAnswers: a client on the plain path (SANDBOXD_PLAIN=json: encoding/json decodes every
// answer) reads a file and a command's output as the default one, whose jsondoc decodes them, does.
func TestPlainJSONAnswers(t *testing.T) {
	base := newDaemon(t, 0)
	fast := newClient(t, base)
	t.Setenv(fastpath.Env, fastpath.JSON)
	plain := newClient(t, base)
	ctx := t.Context()
	sb := ready(t, fast)
	data := bytes.Repeat([]byte("caf\xc3\xa9 \x00\x01\"\\\n"), 1<<15)
	if _, err := fast.WriteFile(ctx, sb.ID, sb.Generation, "f.bin", data); err != nil {
		t.Fatal(err)
	}
	cmd := sandbox.Command{Argv: []string{"cat", "f.bin"}, MaxOutputBytes: 1 << 20, Timeout: time.Minute}
	for _, c := range []*client.Client{fast, plain} {
		got, err := c.ReadFile(ctx, sb.ID, sb.Generation, "f.bin")
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read %d bytes of %d: %v", len(got), len(data), err)
		}
		res, err := c.Exec(ctx, sb.ID, sb.Generation, cmd)
		if err != nil || res.ExitCode == nil || *res.ExitCode != 0 || res.Stdout != string(data) || res.Truncated || res.StartedAt.IsZero() {
			t.Fatalf("exec: %v, %+v", err, res)
		}
	}
}
