package apitest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/provider/fault"
)

// hiding wraps inner in the fault provider with a manifest that lacks the given capabilities.
func hiding(inner sandbox.Provider, hide ...sandbox.Capability) *fault.Provider {
	f := fault.New(inner)
	f.OnManifest = fault.Mangle(func(m sandbox.Manifest) sandbox.Manifest {
		c := &m.Capabilities
		for _, h := range hide {
			switch h {
			case sandbox.CapCommandExecution:
				c.CommandExecution = false
			case sandbox.CapFileAccess:
				c.FileAccess = false
			case sandbox.CapPauseResume:
				c.PauseResume = false
			case sandbox.CapImageReference:
				c.ImageReference = false
			case sandbox.CapTemplateReference:
				c.TemplateReference = false
			case sandbox.CapMemorySnapshot:
				c.MemorySnapshot = false
			}
		}
		return m
	})
	return f
}

// failAll makes every provider call the HTTP API can reach fail with err (wrapped), or heals them all
// when err is nil. For ErrProviderProtocol the manifest and command results come back malformed instead,
// so the runtime's own validation is what finds them out.
func failAll(f *fault.Provider, err error) {
	f.SetHooks(func(f *fault.Provider) {
		if err == nil {
			f.OnManifest, f.OnExec, f.OnAllocate, f.OnObserve = nil, nil, nil, nil
			f.OnReadFile, f.OnWriteFile, f.OnListFiles = nil, nil, nil
			f.OnPause, f.OnResume, f.OnRelease = nil, nil, nil
			return
		}
		wrapped := fmt.Errorf("injected: %w", err)
		f.OnManifest = fault.Fail[sandbox.Manifest](wrapped)
		f.OnExec = fault.Fail[sandbox.CommandResult](wrapped)
		if errors.Is(err, sandbox.ErrProviderProtocol) {
			f.OnManifest = fault.Mangle(func(m sandbox.Manifest) sandbox.Manifest { m.Name = ""; return m })
			f.OnExec = fault.Mangle(func(r sandbox.CommandResult) sandbox.CommandResult { r.TimedOut = true; return r })
		}
		f.OnAllocate = fault.Fail[sandbox.Observation](wrapped)
		f.OnObserve = fault.Fail[sandbox.Observation](wrapped)
		f.OnReadFile = fault.Fail[[]byte](wrapped)
		f.OnWriteFile = fault.Fail[struct{}](wrapped)
		f.OnListFiles = fault.Fail[[]sandbox.FileEntry](wrapped)
		f.OnPause = fault.Fail[struct{}](wrapped)
		f.OnResume = fault.Fail[struct{}](wrapped)
		f.OnRelease = fault.Fail[struct{}](wrapped)
	})
}

func (s *suite) testCreateUnsupported(t *testing.T) {
	inner := s.newProvider(t)
	st := s.newStack(t, hiding(inner, sandbox.CapImageReference, sandbox.CapTemplateReference, sandbox.CapMemorySnapshot), options{})
	for _, body := range []string{
		`{"clientRequestId":"a","requiredCapabilities":["memorySnapshot"]}`,
		`{"clientRequestId":"b","image":"docker.io/library/busybox:1.36"}`,
		`{"clientRequestId":"c","template":"python-3"}`,
	} {
		st.c.fails("POST", "/v1/sandboxes", body, 422, sandbox.CodeUnsupportedCapability)
	}
	// Recreate checks the new spec the same way.
	sb := st.create(nil)
	st.c.ok("POST", sbPath(sb.ID, "/actions/terminate"), gen(1), 200, nil)
	st.waitState(sb.ID, sandbox.StateTerminated)
	st.c.fails("POST", sbPath(sb.ID, "/actions/recreate"), `{"expectedGeneration":1,"spec":{"clientRequestId":"d","image":"busybox"}}`, 422, sandbox.CodeUnsupportedCapability)
	st.c.fails("POST", sbPath(sb.ID, "/actions/recreate"), `{"expectedGeneration":1,"spec":{"clientRequestId":"e","requiredCapabilities":["memorySnapshot"]}}`, 422, sandbox.CodeUnsupportedCapability)
	st.c.ok("POST", "/v1/sandboxes/"+string(sb.ID)+"/actions/terminate", gen(1), 200, nil)
	var list struct{ Sandboxes []any }
	st.c.ok("GET", "/v1/sandboxes", nil, 200, &list)
	if len(list.Sandboxes) != 1 {
		t.Fatalf("refused creates recorded %d sandboxes beside the one made", len(list.Sandboxes)-1)
	}
}

func (s *suite) testPauseUnsupported(t *testing.T) {
	st := s.newStack(t, hiding(s.newProvider(t), sandbox.CapPauseResume), options{})
	sb := st.create(nil)
	st.c.fails("POST", sbPath(sb.ID, "/actions/pause"), gen(1), 422, sandbox.CodeUnsupportedCapability)
	st.c.fails("POST", sbPath(sb.ID, "/actions/resume"), gen(1), 422, sandbox.CodeUnsupportedCapability)
	// The capability is checked before the generation.
	st.c.fails("POST", sbPath(sb.ID, "/actions/pause"), gen(3), 422, sandbox.CodeUnsupportedCapability)
	st.waitState(sb.ID, sandbox.StateReady)
}

func (s *suite) testDataPlaneUnsupported(t *testing.T) {
	st := s.newStack(t, hiding(s.newProvider(t), sandbox.CapCommandExecution, sandbox.CapFileAccess), options{})
	sb := st.create(nil)
	st.c.fails("POST", sbPath(sb.ID, "/commands"), cmdBody(1, "true"), 422, sandbox.CodeUnsupportedCapability)
	st.c.fails("GET", filePath(sb.ID, "a", 1), nil, 422, sandbox.CodeUnsupportedCapability)
	st.c.fails("PUT", sbPath(sb.ID, "/files/content"), fileBody(1, "a", nil), 422, sandbox.CodeUnsupportedCapability)
	st.c.fails("GET", entriesPath(sb.ID, ".", 1), nil, 422, sandbox.CodeUnsupportedCapability)
}

// providerErrors drives every operation that calls the provider into a provider error of class want.
func (s *suite) providerErrors(t *testing.T, want error, status int, code sandbox.ErrorCode) {
	f := fault.New(s.newProvider(t))
	pausable := supports(t, f, sandbox.CapPauseResume)
	st := s.newStack(t, f, options{})
	sb := st.create(nil)
	var paused *sandbox.Sandbox
	if pausable {
		paused = st.create(nil)
		st.c.ok("POST", sbPath(paused.ID, "/actions/pause"), gen(1), 200, nil)
		st.waitState(paused.ID, sandbox.StatePaused)
	}
	done := st.create(nil)
	st.c.ok("POST", sbPath(done.ID, "/actions/terminate"), gen(1), 200, nil)
	st.waitState(done.ID, sandbox.StateTerminated)

	failAll(f, want)
	st.c.fails("GET", "/v1/runtime", nil, status, code)
	st.c.fails("POST", "/v1/sandboxes", map[string]any{"clientRequestId": "fails"}, status, code)
	st.c.fails("POST", sbPath(sb.ID, "/actions/reconcile"), nil, status, code)
	st.c.fails("POST", sbPath(sb.ID, "/commands"), cmdBody(1, "true"), status, code)
	st.c.fails("GET", filePath(sb.ID, "a", 1), nil, status, code)
	st.c.fails("PUT", sbPath(sb.ID, "/files/content"), fileBody(1, "a", nil), status, code)
	st.c.fails("GET", entriesPath(sb.ID, ".", 1), nil, status, code)
	if pausable {
		st.c.fails("POST", sbPath(sb.ID, "/actions/pause"), gen(1), status, code)
		st.c.fails("POST", sbPath(paused.ID, "/actions/resume"), gen(1), status, code)
	}
	st.c.fails("POST", sbPath(done.ID, "/actions/recreate"), map[string]any{"expectedGeneration": 1, "spec": map[string]any{"clientRequestId": "again"}}, status, code)
	// Terminate always goes through: the runtime retries the clean-up by itself until the provider heals.
	var term sandbox.Sandbox
	st.c.ok("POST", sbPath(sb.ID, "/actions/terminate"), gen(1), 200, &term)
	if term.State != sandbox.StateTerminating && term.State != sandbox.StateTerminated {
		t.Fatalf("terminate with a failing provider answered %s", term.State)
	}
	failAll(f, nil)
	st.waitState(sb.ID, sandbox.StateTerminated)
}

func (s *suite) testProviderUnavailable(t *testing.T) {
	s.providerErrors(t, sandbox.ErrProviderUnavailable, 503, sandbox.CodeProviderUnavailable)
}

func (s *suite) testProviderProtocol(t *testing.T) {
	s.providerErrors(t, sandbox.ErrProviderProtocol, 502, sandbox.CodeProviderProtocol)
}

// supports reports whether the provider's manifest claims c: the suite checks what a provider lacks as
// refused, not as broken.
func supports(t *testing.T, p sandbox.Provider, c sandbox.Capability) bool {
	t.Helper()
	m, err := p.Manifest(context.Background())
	if err != nil {
		t.Fatalf("manifest: %v", err)
	}
	return m.Capabilities.Has(c)
}
