package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/internal/errhttp"
	teststack "github.com/sandboxd/sandbox/internal/testenv/stack"
	"github.com/sandboxd/sandbox/provider/fault"
	"github.com/sandboxd/sandbox/provider/host"
)

type stack struct {
	t    *testing.T
	url  string
	prov *fault.Provider
	dir  string // the host provider's directory
}

func newStack(t *testing.T, tweak func(*core.Config)) *stack {
	t.Helper()
	dir := t.TempDir()
	inner, err := host.New(host.Config{Dir: filepath.Join(dir, "host")})
	if err != nil {
		t.Fatal(err)
	}
	prov := fault.New(inner)
	s := teststack.New(t, prov, teststack.Core(func(c *core.Config) {
		c.ReconcileInterval, c.ProviderTimeout = -1, 300*time.Millisecond
		if tweak != nil {
			tweak(c)
		}
	}))
	return &stack{t: t, url: s.URL, prov: prov, dir: filepath.Join(dir, "host")}
}

// do sends a JSON request and returns the status and body.
func (s *stack) do(method, path string, body any) (int, []byte) {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.url+path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// fails checks an error answer of the given class.
func (s *stack) fails(method, path string, body any, want error) {
	s.t.Helper()
	st, raw := s.do(method, path, body)
	var er api.ErrorResponse
	if err := json.Unmarshal(raw, &er); err != nil {
		s.t.Fatalf("%s %s: %d %s is not an ErrorResponse", method, path, st, raw)
	}
	class := sandbox.ClassOf(want)
	if st != errhttp.Status(class.Code) || !errors.Is(sandbox.ErrorForCode(er.Error.Code), want) {
		s.t.Fatalf("%s %s: %d %s, want %d %s", method, path, st, raw, errhttp.Status(class.Code), class.Code)
	}
}

func (s *stack) get(id sandbox.ID) sandbox.Sandbox {
	s.t.Helper()
	st, raw := s.do("GET", "/v1/sandboxes/"+string(id), nil)
	var sb sandbox.Sandbox
	if st != 200 || json.Unmarshal(raw, &sb) != nil {
		s.t.Fatalf("get %s: %d %s", id, st, raw)
	}
	return sb
}

func (s *stack) create(key string) sandbox.Sandbox {
	s.t.Helper()
	st, raw := s.do("POST", "/v1/sandboxes", map[string]any{"clientRequestId": key})
	var sb sandbox.Sandbox
	if st != 201 || json.Unmarshal(raw, &sb) != nil {
		s.t.Fatalf("create %s: %d %s", key, st, raw)
	}
	return sb
}

// only finds the one sandbox of the store (after a create that failed and returned no body).
func (s *stack) only() sandbox.Sandbox {
	s.t.Helper()
	st, raw := s.do("GET", "/v1/sandboxes", nil)
	var list struct{ Sandboxes []sandbox.Sandbox }
	if st != 200 || json.Unmarshal(raw, &list) != nil || len(list.Sandboxes) != 1 {
		s.t.Fatalf("list: %d %s", st, raw)
	}
	return list.Sandboxes[0]
}

func (s *stack) waitState(id sandbox.ID, want sandbox.State) sandbox.Sandbox {
	s.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		sb := s.get(id)
		if sb.State == want {
			return sb
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("sandbox %s is %s, want %s", id, sb.State, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// terminated terminates sb (which may be failed or stuck) and checks that it reaches terminated and
// that its provider resource is gone.
func (s *stack) terminated(sb sandbox.Sandbox) {
	s.t.Helper()
	st, raw := s.do("POST", "/v1/sandboxes/"+string(sb.ID)+"/actions/terminate", map[string]any{"expectedGeneration": sb.Generation})
	if st != 200 {
		s.t.Fatalf("terminate of a %s sandbox: %d %s", sb.State, st, raw)
	}
	s.waitState(sb.ID, sandbox.StateTerminated)
	if _, err := os.Lstat(filepath.Join(s.dir, sb.Ref().Name())); !errors.Is(err, os.ErrNotExist) {
		s.t.Fatalf("the resource of terminated sandbox %s is still there: %v", sb.ID, err)
	}
}

func action(id sandbox.ID, a string) string { return fmt.Sprintf("/v1/sandboxes/%s/actions/%s", id, a) }

func gen(g sandbox.Generation) map[string]any { return map[string]any{"expectedGeneration": g} }

var errDied = errors.New("provider process died")

// TestHangsAreAnswered503: a provider that never answers is cut off by the provider timeout; the client
// gets 503 and the sandbox can be terminated.
func TestHangsAreAnswered503(t *testing.T) {
	s := newStack(t, nil)
	sb := s.create("hang")
	s.prov.SetHooks(func(p *fault.Provider) {
		p.OnExec = fault.Hang[sandbox.CommandResult]()
		p.OnWriteFile = fault.Hang[struct{}]()
		p.OnReadFile = fault.Hang[[]byte]()
		p.OnObserve = fault.Hang[sandbox.Observation]()
	})
	base := "/v1/sandboxes/" + string(sb.ID)
	// A command's own timeout comes on top of the provider timeout: ask for one second.
	s.fails("POST", base+"/commands", map[string]any{"expectedGeneration": 1, "argv": []string{"true"}, "timeoutSeconds": 1}, sandbox.ErrProviderUnavailable)
	s.fails("PUT", base+"/files/content", map[string]any{"expectedGeneration": 1, "path": "f", "contentBase64": ""}, sandbox.ErrProviderUnavailable)
	s.fails("GET", base+"/files/content?path=f&expectedGeneration=1", nil, sandbox.ErrProviderUnavailable)
	s.fails("POST", action(sb.ID, "reconcile"), nil, sandbox.ErrProviderUnavailable)

	s.prov.SetHooks(func(p *fault.Provider) { p.OnPause = fault.Hang[struct{}]() })
	s.fails("POST", action(sb.ID, "pause"), gen(1), sandbox.ErrProviderUnavailable)
	got := s.get(sb.ID)
	if got.State != sandbox.StateFailed || got.Failure == nil || got.Failure.Code != string(sandbox.CodeProviderUnavailable) {
		t.Fatalf("after a hung pause: %+v", got)
	}
	s.prov.SetHooks(func(p *fault.Provider) { p.OnPause = nil })
	s.terminated(got)

	s.prov.SetHooks(func(p *fault.Provider) { p.OnAllocate = fault.Hang[sandbox.Observation]() })
	s.fails("POST", "/v1/sandboxes", map[string]any{"clientRequestId": "hang-create"}, sandbox.ErrProviderUnavailable)
}

// TestProviderDiesHalfWay: the provider does the work and then fails before answering, in create, pause
// and terminate. The sandbox is failed (create, pause) or terminated after the retry (terminate), and
// nothing is left behind.
func TestProviderDiesHalfWay(t *testing.T) {
	s := newStack(t, nil)
	s.prov.SetHooks(func(p *fault.Provider) { p.OnAllocate = fault.Crash[sandbox.Observation](errDied) })
	s.fails("POST", "/v1/sandboxes", map[string]any{"clientRequestId": "crash-create"}, sandbox.ErrProviderUnavailable)
	sb := s.only()
	if sb.State != sandbox.StateFailed || sb.Failure == nil {
		t.Fatalf("after a create that died half way: %+v", sb)
	}
	if _, err := os.Stat(filepath.Join(s.dir, sb.Ref().Name())); err != nil {
		t.Fatalf("the half-made resource should exist until terminate: %v", err)
	}
	s.prov.SetHooks(func(p *fault.Provider) { p.OnAllocate = nil })
	s.terminated(sb)

	sb = s.create("crash-pause")
	s.prov.SetHooks(func(p *fault.Provider) { p.OnPause = fault.Crash[struct{}](errDied) })
	s.fails("POST", action(sb.ID, "pause"), gen(1), sandbox.ErrProviderUnavailable)
	if got := s.get(sb.ID); got.State != sandbox.StateFailed {
		t.Fatalf("after a pause that died half way: %+v", got)
	}
	s.terminated(s.get(sb.ID))

	sb = s.create("crash-terminate")
	var calls atomic.Int32
	s.prov.SetHooks(func(p *fault.Provider) {
		crash := fault.Crash[struct{}](errDied)
		p.OnRelease = func(ctx context.Context, op fault.Op, call func(context.Context) (struct{}, error)) (struct{}, error) {
			if calls.Add(1) == 1 {
				return crash(ctx, op, call)
			}
			return call(ctx)
		}
	})
	s.terminated(sb)
	if n := calls.Load(); n < 2 {
		t.Fatalf("release was called %d times: the failed clean-up was not retried", n)
	}
}

// TestMalformedObservationsAre502: a provider answering nonsense is a 502, and the sandbox stays
// terminable.
func TestMalformedObservationsAre502(t *testing.T) {
	s := newStack(t, nil)
	s.prov.SetHooks(func(p *fault.Provider) {
		p.OnAllocate = fault.Mangle(func(o sandbox.Observation) sandbox.Observation {
			o.State = "exploded"
			return o
		})
	})
	s.fails("POST", "/v1/sandboxes", map[string]any{"clientRequestId": "mangled"}, sandbox.ErrProviderProtocol)
	sb := s.only()
	if sb.State != sandbox.StateFailed || sb.Failure == nil || sb.Failure.Code != string(sandbox.CodeProviderProtocol) {
		t.Fatalf("after a malformed allocation: %+v", sb)
	}
	s.prov.SetHooks(func(p *fault.Provider) { p.OnAllocate = nil })
	s.terminated(sb)

	ok := s.create("ok")
	s.prov.SetHooks(func(p *fault.Provider) {
		p.OnObserve = fault.Mangle(func(o sandbox.Observation) sandbox.Observation {
			o.Ref.Generation++ // an observation of another generation
			return o
		})
		p.OnExec = fault.Mangle(func(r sandbox.CommandResult) sandbox.CommandResult {
			r.ExitCode = nil // neither exited nor timed out nor cancelled
			return r
		})
	})
	s.fails("POST", action(ok.ID, "reconcile"), nil, sandbox.ErrProviderProtocol)
	s.fails("POST", "/v1/sandboxes/"+string(ok.ID)+"/commands", map[string]any{"expectedGeneration": 1, "argv": []string{"true"}}, sandbox.ErrProviderProtocol)
	s.prov.SetHooks(func(p *fault.Provider) { p.OnObserve, p.OnExec = nil, nil })
	s.terminated(s.get(ok.ID))
}

// TestLostResourceIsFoundAndFailed: a resource released behind the runtime's back is found by reconcile
// (on request and periodically) and the sandbox is failed with resource_lost; it can be terminated and
// recreated.
func TestLostResourceIsFoundAndFailed(t *testing.T) {
	s := newStack(t, func(c *core.Config) { c.ReconcileInterval = 100 * time.Millisecond })
	byRequest, periodic := s.create("lost-1"), s.create("lost-2")
	for _, sb := range []sandbox.Sandbox{byRequest, periodic} {
		if err := s.prov.Lose(context.Background(), sb.Ref()); err != nil {
			t.Fatal(err)
		}
	}
	st, raw := s.do("POST", action(byRequest.ID, "reconcile"), nil)
	var got sandbox.Sandbox
	json.Unmarshal(raw, &got)
	if st != 200 || got.State != sandbox.StateFailed || got.Failure == nil || got.Failure.Code != "resource_lost" {
		t.Fatalf("reconcile of a lost resource: %d %s", st, raw)
	}
	got = s.waitState(periodic.ID, sandbox.StateFailed)
	if got.Failure == nil || got.Failure.Code != "resource_lost" {
		t.Fatalf("periodic reconcile of a lost resource: %+v", got)
	}
	s.terminated(got)
	st, raw = s.do("POST", action(periodic.ID, "recreate"), map[string]any{"expectedGeneration": 1, "spec": map[string]any{"clientRequestId": "lost-2-again"}})
	if st != 200 {
		t.Fatalf("recreate after a lost resource: %d %s", st, raw)
	}
}

// TestStuckSandboxesCanBeTerminated: a sandbox stuck starting (the provider never reports it ready) or
// whose clean-up keeps failing is bounded: it can be terminated at any moment, and a release that never
// succeeds ends in terminated after the release bound, with the leftover named in the event.
func TestStuckSandboxesCanBeTerminated(t *testing.T) {
	s := newStack(t, func(c *core.Config) {
		c.ReadyTimeout = 500 * time.Millisecond
		c.ReleaseBound = 500 * time.Millisecond
	})
	starting := fault.Mangle(func(o sandbox.Observation) sandbox.Observation {
		o.State = sandbox.ObservedStarting
		return o
	})
	s.prov.SetHooks(func(p *fault.Provider) { p.OnAllocate, p.OnObserve = starting, starting })
	early := s.create("stuck-1")
	if early.State != sandbox.StateStarting {
		t.Fatalf("a sandbox the provider keeps starting is %s", early.State)
	}
	s.terminated(early)

	late := s.create("stuck-2")
	got := s.waitState(late.ID, sandbox.StateFailed) // the ready timeout
	if got.Failure == nil {
		t.Fatalf("failed without a reason: %+v", got)
	}
	s.prov.SetHooks(func(p *fault.Provider) {
		p.OnAllocate, p.OnObserve = nil, nil
		p.OnRelease = fault.Fail[struct{}](errDied)
	})
	st, raw := s.do("POST", action(late.ID, "terminate"), gen(1))
	if st != 200 {
		t.Fatalf("terminate with a failing clean-up: %d %s", st, raw)
	}
	s.waitState(late.ID, sandbox.StateTerminated)
	st, raw = s.do("GET", "/v1/events?sandboxId="+string(late.ID), nil)
	var page struct{ Events []sandbox.Event }
	json.Unmarshal(raw, &page)
	last := page.Events[len(page.Events)-1]
	var data sandbox.StateChangedData
	json.Unmarshal(last.Data, &data)
	if st != 200 || data.To != sandbox.StateTerminated || !bytes.Contains([]byte(data.Reason), []byte(late.Ref().Name())) {
		t.Fatalf("the give-up event does not name the leftover %s: %+v", late.Ref().Name(), data)
	}
}
