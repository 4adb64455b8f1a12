package apitest

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

func (s *suite) testHealth(t *testing.T) {
	st := s.newStack(t, s.newProvider(t), options{})
	var h api.Health
	st.c.ok("GET", "/healthz", nil, 200, &h)
	if h.Status != "ok" {
		t.Fatalf("healthz status %q", h.Status)
	}
	var info api.RuntimeInfo
	st.c.ok("GET", "/v1/runtime", nil, 200, &info)
	if info.ProtocolVersion != sandbox.ProtocolVersion || info.Provider.Name == "" || info.Provider.RuntimeClass == "" {
		t.Fatalf("runtime info %+v", info)
	}
}

func (s *suite) testRouting(t *testing.T) {
	st := s.newStack(t, s.newProvider(t), options{})
	for _, path := range []string{"/", "/v1", "/v1/nothing", "/v1/sandboxes/x/nothing", "/v1/sandboxes/x/actions/explode", "/v2/sandboxes"} {
		st.c.fails("GET", path, nil, 404, sandbox.CodeNotFound)
	}
	for _, c := range []struct{ method, path, allow string }{
		{"DELETE", "/v1/sandboxes", "GET, POST, HEAD"},
		{"PUT", "/healthz", "GET, HEAD"},
		{"POST", "/v1/events/stream", "GET, HEAD"},
		{"GET", "/v1/sandboxes/x/actions/pause", "POST"},
		{"DELETE", "/v1/sandboxes/x/files/content", "GET, PUT, HEAD"},
		{"PATCH", "/v1/sandboxes/x", "GET, HEAD"},
	} {
		r := st.c.send(c.method, c.path, nil)
		st.c.checkError(c.method, c.path, r, 405, sandbox.CodeMethodNotAllowed)
		if got := r.header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
	}
}

func (s *suite) testBodyLimit(t *testing.T) {
	st := s.newStack(t, s.newProvider(t), options{maxBodyBytes: 1024})
	big := `{"clientRequestId":"big","extensions":{"x.y":"` + strings.Repeat("a", 2048) + `"}}`
	// Refused from the Content-Length, before the body is read.
	st.c.fails("POST", "/v1/sandboxes", big, 413, sandbox.CodeRequestTooLarge)
	// Refused while reading, when the length is not announced.
	r := st.c.raw("POST", "/v1/sandboxes", io.MultiReader(strings.NewReader(big)), nil)
	st.c.checkError("POST", "/v1/sandboxes", r, 413, sandbox.CodeRequestTooLarge)
	// Under the limit is fine.
	var sb sandbox.Sandbox
	st.c.ok("POST", "/v1/sandboxes", map[string]any{"clientRequestId": "small"}, 201, &sb)
	// Every operation with a body has the limit.
	st.c.fails("POST", sbPath(sb.ID, "/commands"), bytes.Repeat([]byte(" "), 2000), 413, sandbox.CodeRequestTooLarge)
	st.c.fails("PUT", sbPath(sb.ID, "/files/content"), bytes.Repeat([]byte(" "), 2000), 413, sandbox.CodeRequestTooLarge)
}

func (s *suite) testCreate(t *testing.T) {
	st := s.newStack(t, s.newProvider(t), options{})
	spec := map[string]any{
		"clientRequestId": "create-1",
		"resources":       map[string]any{"cpuMillis": 500, "memoryMiB": 256},
		"extensions":      map[string]any{"acme.example": map[string]any{"b": 1, "a": []any{1, 2}}},
	}
	var first sandbox.Sandbox
	st.c.ok("POST", "/v1/sandboxes", spec, 201, &first)
	if first.ID == "" || first.Generation != 1 || first.Spec.ClientRequestID != "create-1" {
		t.Fatalf("created %+v", first)
	}
	switch first.State {
	case sandbox.StateRequested, sandbox.StateStarting, sandbox.StateReady:
	default:
		t.Fatalf("a new sandbox is %s", first.State)
	}
	// The same intent, keys in another order and other whitespace: the same sandbox, 201 again.
	same := `{ "extensions": {"acme.example": {"a": [1,2], "b": 1}}, "resources": {"memoryMiB": 256, "cpuMillis": 500},
		"clientRequestId": "create-1" }`
	var again sandbox.Sandbox
	st.c.ok("POST", "/v1/sandboxes", same, 201, &again)
	if again.ID != first.ID || again.Generation != first.Generation {
		t.Fatalf("repeat made %s/%d, want %s/%d", again.ID, again.Generation, first.ID, first.Generation)
	}
	// The same key with another spec.
	spec["resources"] = map[string]any{"cpuMillis": 1000}
	st.c.fails("POST", "/v1/sandboxes", spec, 409, sandbox.CodeIdempotencyConflict)
	st.waitState(first.ID, sandbox.StateReady)

	var list api.SandboxList
	st.c.ok("GET", "/v1/sandboxes", nil, 200, &list)
	if len(list.Sandboxes) != 1 {
		t.Fatalf("%d sandboxes after an idempotent repeat and a conflict, want 1", len(list.Sandboxes))
	}
}

func (s *suite) testCreateValidation(t *testing.T) {
	st := s.newStack(t, s.newProvider(t), options{})
	for name, body := range map[string]string{
		"not JSON":                   `{"clientRequestId":`,
		"trailing data":              `{"clientRequestId":"a"} {}`,
		"empty body":                 ``,
		"array":                      `[]`,
		"null":                       `null`,
		"unknown field":              `{"clientRequestId":"a","colour":"blue"}`,
		"unknown field, other case":  `{"clientRequestId":"a","ClientRequestID":"b"}`,
		"missing clientRequestId":    `{"image":"x"}`,
		"clientRequestId number":     `{"clientRequestId":7}`,
		"clientRequestId empty":      `{"clientRequestId":""}`,
		"clientRequestId blank":      `{"clientRequestId":" \t "}`,
		"image blank":                `{"clientRequestId":"a","image":"  "}`,
		"template empty":             `{"clientRequestId":"a","template":""}`,
		"image null":                 `{"clientRequestId":"a","image":null}`,
		"image and template":         `{"clientRequestId":"a","image":"x","template":"y"}`,
		"resources unknown field":    `{"clientRequestId":"a","resources":{"gpus":1}}`,
		"cpuMillis zero":             `{"clientRequestId":"a","resources":{"cpuMillis":0}}`,
		"memoryMiB negative":         `{"clientRequestId":"a","resources":{"memoryMiB":-1}}`,
		"diskMiB fraction":           `{"clientRequestId":"a","resources":{"diskMiB":1.5}}`,
		"diskMiB string":             `{"clientRequestId":"a","resources":{"diskMiB":"1"}}`,
		"capability unknown":         `{"clientRequestId":"a","requiredCapabilities":["teleport"]}`,
		"capabilities repeated":      `{"clientRequestId":"a","requiredCapabilities":["fileAccess","fileAccess"]}`,
		"capabilities not array":     `{"clientRequestId":"a","requiredCapabilities":"fileAccess"}`,
		"extension key no namespace": `{"clientRequestId":"a","extensions":{"plain":1}}`,
		"extension key upper":        `{"clientRequestId":"a","extensions":{"Acme.x":1}}`,
		"extension key empty name":   `{"clientRequestId":"a","extensions":{"acme.":1}}`,
		"extensions not object":      `{"clientRequestId":"a","extensions":[1]}`,
	} {
		msg := st.c.fails("POST", "/v1/sandboxes", body, 400, sandbox.CodeInvalidRequest)
		if strings.Contains(msg, "Schema:") || strings.Contains(msg, "\n") {
			t.Errorf("%s: message is not one line: %q", name, msg)
		}
	}
	// A media type other than JSON.
	r := st.c.raw("POST", "/v1/sandboxes", strings.NewReader(`{"clientRequestId":"a"}`), http.Header{"Content-Type": {"text/plain"}})
	st.c.checkError("POST", "/v1/sandboxes", r, 400, sandbox.CodeInvalidRequest)
	// Nothing refused was recorded.
	var list api.SandboxList
	st.c.ok("GET", "/v1/sandboxes", nil, 200, &list)
	if len(list.Sandboxes) != 0 {
		t.Fatalf("refused creates recorded %d sandboxes", len(list.Sandboxes))
	}
	var events api.EventList
	st.c.ok("GET", "/v1/events", nil, 200, &events)
	if len(events.Events) != 0 {
		t.Fatalf("refused creates emitted %d events", len(events.Events))
	}
}

func (s *suite) testGetList(t *testing.T) {
	st := s.newStack(t, s.newProvider(t), options{})
	var empty api.SandboxList
	st.c.ok("GET", "/v1/sandboxes", nil, 200, &empty)
	if empty.Sandboxes == nil || len(empty.Sandboxes) != 0 {
		t.Fatalf("empty list %+v", empty)
	}
	a := st.create(nil)
	b := st.create(nil)
	var got sandbox.Sandbox
	st.c.ok("GET", sbPath(a.ID, ""), nil, 200, &got)
	if got.ID != a.ID || got.State != sandbox.StateReady || got.Provider == "" {
		t.Fatalf("get %+v", got)
	}
	var list api.SandboxList
	st.c.ok("GET", "/v1/sandboxes", nil, 200, &list)
	if len(list.Sandboxes) != 2 || list.Sandboxes[0].ID != a.ID || list.Sandboxes[1].ID != b.ID {
		t.Fatalf("list %+v, want %s then %s", list.Sandboxes, a.ID, b.ID)
	}
	st.c.fails("GET", sbPath("sbx_missing", ""), nil, 404, sandbox.CodeNotFound)
}

func (s *suite) testActions(t *testing.T) {
	prov := s.newProvider(t)
	pausable := supports(t, prov, sandbox.CapPauseResume)
	if !pausable {
		s.cov.mu.Lock()
		s.cov.noPause = true
		s.cov.mu.Unlock()
	}
	st := s.newStack(t, prov, options{})
	sb := st.create(nil)
	for _, action := range []string{"pause", "resume", "terminate", "recreate"} {
		p := sbPath(sb.ID, "/actions/"+action)
		missing := gen(1)
		if action == "recreate" {
			missing["spec"] = map[string]any{"clientRequestId": "m"}
		}
		st.c.fails("POST", sbPath("sbx_missing", "/actions/"+action), missing, 404, sandbox.CodeNotFound)
		for _, bad := range []string{``, `{}`, `{"expectedGeneration":0}`, `{"expectedGeneration":"1"}`, `{"expectedGeneration":1.5}`, `{"expectedGeneration":1,"force":true}`} {
			st.c.fails("POST", p, bad, 400, sandbox.CodeInvalidRequest)
		}
		switch {
		case (action == "pause" || action == "resume") && !pausable:
			// The capability is checked before the generation.
			st.c.fails("POST", p, gen(sb.Generation+1), 422, sandbox.CodeUnsupportedCapability)
		case action != "recreate":
			st.c.fails("POST", p, gen(sb.Generation+1), 409, sandbox.CodeGenerationConflict)
		}
	}
	// Terminate, and again: a retry answers 200 with the resource as it is.
	var term sandbox.Sandbox
	st.c.ok("POST", sbPath(sb.ID, "/actions/terminate"), gen(1), 200, &term)
	if term.State != sandbox.StateTerminating && term.State != sandbox.StateTerminated {
		t.Fatalf("terminate answered %s", term.State)
	}
	st.waitState(sb.ID, sandbox.StateTerminated)
	st.c.ok("POST", sbPath(sb.ID, "/actions/terminate"), gen(1), 200, &term)
	if term.State != sandbox.StateTerminated {
		t.Fatalf("terminate of terminated answered %s", term.State)
	}
	// Actions that do not apply to terminated.
	if s.manifest(t, st).Capabilities.PauseResume {
		st.c.fails("POST", sbPath(sb.ID, "/actions/pause"), gen(1), 409, sandbox.CodeInvalidState)
		st.c.fails("POST", sbPath(sb.ID, "/actions/resume"), gen(1), 409, sandbox.CodeInvalidState)
	}
	// A stale generation is reported before the state.
	st.c.fails("POST", sbPath(sb.ID, "/actions/terminate"), gen(2), 409, sandbox.CodeGenerationConflict)
}

func (s *suite) manifest(t *testing.T, st *stack) sandbox.Manifest {
	t.Helper()
	var info api.RuntimeInfo
	st.c.ok("GET", "/v1/runtime", nil, 200, &info)
	return info.Provider
}

func (s *suite) testPauseResume(t *testing.T) {
	st := s.newStack(t, s.newProvider(t), options{})
	sb := st.create(nil)
	if !s.manifest(t, st).Capabilities.PauseResume {
		st.c.fails("POST", sbPath(sb.ID, "/actions/pause"), gen(1), 422, sandbox.CodeUnsupportedCapability)
		st.c.fails("POST", sbPath(sb.ID, "/actions/resume"), gen(1), 422, sandbox.CodeUnsupportedCapability)
		return
	}
	var got sandbox.Sandbox
	st.c.ok("POST", sbPath(sb.ID, "/actions/pause"), gen(1), 200, &got)
	if got.State != sandbox.StatePausing && got.State != sandbox.StatePaused {
		t.Fatalf("pause answered %s", got.State)
	}
	st.waitState(sb.ID, sandbox.StatePaused)
	st.c.ok("POST", sbPath(sb.ID, "/actions/pause"), gen(1), 200, &got) // already paused
	if got.State != sandbox.StatePaused {
		t.Fatalf("pause of paused answered %s", got.State)
	}
	// Data-plane calls need ready.
	st.c.fails("POST", sbPath(sb.ID, "/commands"), map[string]any{"expectedGeneration": 1, "argv": []string{"true"}}, 409, sandbox.CodeInvalidState)
	st.c.ok("POST", sbPath(sb.ID, "/actions/resume"), gen(1), 200, &got)
	if got.State != sandbox.StateResuming && got.State != sandbox.StateReady {
		t.Fatalf("resume answered %s", got.State)
	}
	st.waitState(sb.ID, sandbox.StateReady)
	st.c.ok("POST", sbPath(sb.ID, "/actions/resume"), gen(1), 200, &got) // already ready
	if got.State != sandbox.StateReady {
		t.Fatalf("resume of ready answered %s", got.State)
	}
	st.c.fails("POST", sbPath(sb.ID, "/actions/recreate"), map[string]any{"expectedGeneration": 1, "spec": map[string]any{"clientRequestId": "r"}}, 409, sandbox.CodeInvalidState)
}

func (s *suite) testRecreate(t *testing.T) {
	st := s.newStack(t, s.newProvider(t), options{})
	sb := st.create(nil)
	body := func(g sandbox.Generation, key string) map[string]any {
		return map[string]any{"expectedGeneration": g, "spec": map[string]any{"clientRequestId": key}}
	}
	st.c.fails("POST", sbPath(sb.ID, "/actions/recreate"), body(1, "second"), 409, sandbox.CodeInvalidState)
	st.c.ok("POST", sbPath(sb.ID, "/actions/terminate"), gen(1), 200, nil)
	st.waitState(sb.ID, sandbox.StateTerminated)
	st.c.fails("POST", sbPath(sb.ID, "/actions/recreate"), body(2, "second"), 409, sandbox.CodeGenerationConflict)
	st.c.fails("POST", sbPath(sb.ID, "/actions/recreate"), `{"expectedGeneration":1,"spec":{"clientRequestId":"x","image":"a","template":"b"}}`, 400, sandbox.CodeInvalidRequest)
	st.c.fails("POST", sbPath(sb.ID, "/actions/recreate"), `{"expectedGeneration":1}`, 400, sandbox.CodeInvalidRequest)
	var re sandbox.Sandbox
	st.c.ok("POST", sbPath(sb.ID, "/actions/recreate"), body(1, "second"), 200, &re)
	if re.ID != sb.ID || re.Generation != 2 || re.Spec.ClientRequestID != "second" {
		t.Fatalf("recreate answered %+v", re)
	}
	st.waitState(sb.ID, sandbox.StateReady)
	// The first generation's key is spent.
	st.c.fails("POST", "/v1/sandboxes", map[string]any{"clientRequestId": sb.Spec.ClientRequestID}, 409, sandbox.CodeIdempotencyConflict)
	// The old generation is fenced off.
	st.c.fails("POST", sbPath(sb.ID, "/actions/terminate"), gen(1), 409, sandbox.CodeGenerationConflict)
}

func (s *suite) testReconcile(t *testing.T) {
	st := s.newStack(t, s.newProvider(t), options{})
	sb := st.create(nil)
	var got sandbox.Sandbox
	st.c.ok("POST", sbPath(sb.ID, "/actions/reconcile"), nil, 200, &got)
	if got.ID != sb.ID || got.Generation != sb.Generation || got.State != sandbox.StateReady {
		t.Fatalf("reconcile answered %+v", got)
	}
	st.c.fails("POST", sbPath("sbx_missing", "/actions/reconcile"), nil, 404, sandbox.CodeNotFound)
}
