package apitest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/sandboxd/sandbox"
)

// faulty wraps a provider to fail on demand and to hide capabilities. It keeps to what the HTTP suite
// needs: an injected error per method name and a narrower manifest; the inner provider does the real work.
type faulty struct {
	inner sandbox.Provider
	hide  map[sandbox.Capability]bool

	mu    sync.Mutex
	fails map[string]error // by method name
}

func newFaulty(inner sandbox.Provider, hide ...sandbox.Capability) *faulty {
	f := &faulty{inner: inner, hide: map[sandbox.Capability]bool{}, fails: map[string]error{}}
	for _, c := range hide {
		f.hide[c] = true
	}
	return f
}

// failWith makes method return err (wrapped) from now on; nil heals it.
func (f *faulty) failWith(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.fails, method)
		return
	}
	f.fails[method] = err
}

func (f *faulty) fault(method string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fails[method]; err != nil {
		return fmt.Errorf("injected into %s: %w", method, err)
	}
	return nil
}

func (f *faulty) Manifest(ctx context.Context) (sandbox.Manifest, error) {
	if err := f.fault("Manifest"); err != nil {
		return sandbox.Manifest{}, err
	}
	m, err := f.inner.Manifest(ctx)
	c := &m.Capabilities
	for capability, field := range map[sandbox.Capability]*bool{
		sandbox.CapCommandExecution: &c.CommandExecution, sandbox.CapFileAccess: &c.FileAccess,
		sandbox.CapPauseResume: &c.PauseResume, sandbox.CapImageReference: &c.ImageReference,
		sandbox.CapTemplateReference: &c.TemplateReference, sandbox.CapResourceLimits: &c.ResourceLimits,
		sandbox.CapMemorySnapshot: &c.MemorySnapshot,
	} {
		if f.hide[capability] {
			*field = false
		}
	}
	return m, err
}

func (f *faulty) Allocate(ctx context.Context, ref sandbox.Ref, spec sandbox.Spec) (sandbox.Observation, error) {
	if err := f.fault("Allocate"); err != nil {
		return sandbox.Observation{}, err
	}
	return f.inner.Allocate(ctx, ref, spec)
}

func (f *faulty) Observe(ctx context.Context, ref sandbox.Ref) (sandbox.Observation, error) {
	if err := f.fault("Observe"); err != nil {
		return sandbox.Observation{}, err
	}
	return f.inner.Observe(ctx, ref)
}

func (f *faulty) Release(ctx context.Context, ref sandbox.Ref) error {
	if err := f.fault("Release"); err != nil {
		return err
	}
	return f.inner.Release(ctx, ref)
}

func (f *faulty) Resources(ctx context.Context) ([]sandbox.Ref, error) {
	return f.inner.Resources(ctx)
}

func (f *faulty) Exec(ctx context.Context, ref sandbox.Ref, cmd sandbox.Command) (sandbox.CommandResult, error) {
	if err := f.fault("Exec"); err != nil {
		return sandbox.CommandResult{}, err
	}
	return f.inner.(sandbox.Executor).Exec(ctx, ref, cmd)
}

func (f *faulty) ReadFile(ctx context.Context, ref sandbox.Ref, path string) ([]byte, error) {
	if err := f.fault("ReadFile"); err != nil {
		return nil, err
	}
	return f.inner.(sandbox.FileSystem).ReadFile(ctx, ref, path)
}

func (f *faulty) WriteFile(ctx context.Context, ref sandbox.Ref, path string, data []byte) error {
	if err := f.fault("WriteFile"); err != nil {
		return err
	}
	return f.inner.(sandbox.FileSystem).WriteFile(ctx, ref, path, data)
}

func (f *faulty) ListFiles(ctx context.Context, ref sandbox.Ref, path string) ([]sandbox.FileEntry, error) {
	if err := f.fault("ListFiles"); err != nil {
		return nil, err
	}
	return f.inner.(sandbox.FileSystem).ListFiles(ctx, ref, path)
}

func (f *faulty) Pause(ctx context.Context, ref sandbox.Ref) error {
	if err := f.fault("Pause"); err != nil {
		return err
	}
	return f.inner.(sandbox.PauseResumer).Pause(ctx, ref)
}

func (f *faulty) Resume(ctx context.Context, ref sandbox.Ref) error {
	if err := f.fault("Resume"); err != nil {
		return err
	}
	return f.inner.(sandbox.PauseResumer).Resume(ctx, ref)
}

func (s *suite) testCreateUnsupported(t *testing.T) {
	inner := s.newProvider(t)
	st := s.newStack(t, newFaulty(inner, sandbox.CapImageReference, sandbox.CapTemplateReference, sandbox.CapMemorySnapshot), options{})
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
	st := s.newStack(t, newFaulty(s.newProvider(t), sandbox.CapPauseResume), options{})
	sb := st.create(nil)
	st.c.fails("POST", sbPath(sb.ID, "/actions/pause"), gen(1), 422, sandbox.CodeUnsupportedCapability)
	st.c.fails("POST", sbPath(sb.ID, "/actions/resume"), gen(1), 422, sandbox.CodeUnsupportedCapability)
	// The capability is checked before the generation.
	st.c.fails("POST", sbPath(sb.ID, "/actions/pause"), gen(3), 422, sandbox.CodeUnsupportedCapability)
	st.waitState(sb.ID, sandbox.StateReady)
}

func (s *suite) testDataPlaneUnsupported(t *testing.T) {
	st := s.newStack(t, newFaulty(s.newProvider(t), sandbox.CapCommandExecution, sandbox.CapFileAccess), options{})
	sb := st.create(nil)
	st.c.fails("POST", sbPath(sb.ID, "/commands"), cmdBody(1, "true"), 422, sandbox.CodeUnsupportedCapability)
	st.c.fails("GET", filePath(sb.ID, "a", 1), nil, 422, sandbox.CodeUnsupportedCapability)
	st.c.fails("PUT", sbPath(sb.ID, "/files/content"), fileBody(1, "a", nil), 422, sandbox.CodeUnsupportedCapability)
	st.c.fails("GET", entriesPath(sb.ID, ".", 1), nil, 422, sandbox.CodeUnsupportedCapability)
}

// providerErrors drives every operation that calls the provider into a provider error of class want.
func (s *suite) providerErrors(t *testing.T, want error, status int, code sandbox.ErrorCode) {
	f := newFaulty(s.newProvider(t))
	st := s.newStack(t, f, options{})
	sb := st.create(nil)
	paused := st.create(nil)
	st.c.ok("POST", sbPath(paused.ID, "/actions/pause"), gen(1), 200, nil)
	st.waitState(paused.ID, sandbox.StatePaused)
	done := st.create(nil)
	st.c.ok("POST", sbPath(done.ID, "/actions/terminate"), gen(1), 200, nil)
	st.waitState(done.ID, sandbox.StateTerminated)

	for _, m := range []string{"Manifest", "Allocate", "Observe", "Exec", "ReadFile", "WriteFile", "ListFiles", "Pause", "Resume"} {
		f.failWith(m, want)
	}
	st.c.fails("GET", "/v1/runtime", nil, status, code)
	st.c.fails("POST", "/v1/sandboxes", map[string]any{"clientRequestId": "fails"}, status, code)
	st.c.fails("POST", sbPath(sb.ID, "/actions/reconcile"), nil, status, code)
	st.c.fails("POST", sbPath(sb.ID, "/commands"), cmdBody(1, "true"), status, code)
	st.c.fails("GET", filePath(sb.ID, "a", 1), nil, status, code)
	st.c.fails("PUT", sbPath(sb.ID, "/files/content"), fileBody(1, "a", nil), status, code)
	st.c.fails("GET", entriesPath(sb.ID, ".", 1), nil, status, code)
	st.c.fails("POST", sbPath(sb.ID, "/actions/pause"), gen(1), status, code)
	st.c.fails("POST", sbPath(paused.ID, "/actions/resume"), gen(1), status, code)
	st.c.fails("POST", sbPath(done.ID, "/actions/recreate"), map[string]any{"expectedGeneration": 1, "spec": map[string]any{"clientRequestId": "again"}}, status, code)
	// Terminate always goes through: the runtime retries the clean-up by itself until the provider heals.
	f.failWith("Release", want)
	var term sandbox.Sandbox
	st.c.ok("POST", sbPath(sb.ID, "/actions/terminate"), gen(1), 200, &term)
	if term.State != sandbox.StateTerminating && term.State != sandbox.StateTerminated {
		t.Fatalf("terminate with a failing provider answered %s", term.State)
	}
	for _, m := range []string{"Manifest", "Allocate", "Observe", "Exec", "ReadFile", "WriteFile", "ListFiles", "Pause", "Resume", "Release"} {
		f.failWith(m, nil)
	}
	st.waitState(sb.ID, sandbox.StateTerminated)
}

func (s *suite) testProviderUnavailable(t *testing.T) {
	s.providerErrors(t, sandbox.ErrProviderUnavailable, 503, sandbox.CodeProviderUnavailable)
}

func (s *suite) testProviderProtocol(t *testing.T) {
	s.providerErrors(t, sandbox.ErrProviderProtocol, 502, sandbox.CodeProviderProtocol)
}
