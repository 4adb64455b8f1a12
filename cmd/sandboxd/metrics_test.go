package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sandboxd/sandbox"
)

// lockedBuffer is a log a daemon writes while a test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestMetrics scrapes a running daemon's /metrics around the calls it makes: the requests counted by
// operation and status, the provider's operations timed, the sandboxes by state, the event log's head,
// the store's commits; /metrics needs a token like the API; every mutation leaves an audit line naming
// the token's owner, and the resource its path names besides a sandbox.
func TestMetrics(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("ci-runner metrics-token-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	m := NewMain(&logs)
	if err := m.ParseFlags([]string{"--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--provider", "host", "--auth-token-file", tokens}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatalf("run: %v\n%s", err, logs.String())
	}
	t.Cleanup(func() { m.Close() })
	base := "http://" + m.Addr()
	call := func(method, path, body string) (int, []byte, http.Header) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, base+path, rd)
		req.Header.Set("Authorization", "Bearer metrics-token-1")
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b, resp.Header
	}
	if st := getStatus(t, base+"/metrics", ""); st != http.StatusUnauthorized {
		t.Fatalf("/metrics without a token: %d, want 401", st)
	}
	scrape := func() map[string]*dto.MetricFamily {
		t.Helper()
		st, body, h := call("GET", "/metrics", "")
		if st != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
			t.Fatalf("/metrics: %d %s", st, h.Get("Content-Type"))
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("parsing /metrics: %v", err)
		}
		return fams
	}
	before := scrape()
	st, body, _ := call("POST", "/v1/sandboxes", `{"clientRequestId":"metrics"}`)
	if st != 201 {
		t.Fatalf("create: %d %s", st, body)
	}
	var sb sandbox.Sandbox
	if err := json.Unmarshal(body, &sb); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for sb.State != sandbox.StateReady {
		if time.Now().After(deadline) {
			t.Fatalf("sandbox is %s", sb.State)
		}
		time.Sleep(10 * time.Millisecond)
		_, body, _ = call("GET", "/v1/sandboxes/"+string(sb.ID), "")
		_ = json.Unmarshal(body, &sb)
	}
	for range 3 {
		if st, body, _ := call("POST", "/v1/sandboxes/"+string(sb.ID)+"/commands", `{"expectedGeneration":1,"argv":["true"]}`); st != 200 {
			t.Fatalf("exec: %d %s", st, body)
		}
	}
	if st, _, _ := call("POST", "/v1/sandboxes/"+string(sb.ID)+"/commands", `{"expectedGeneration":9,"argv":["true"]}`); st != 409 {
		t.Fatalf("stale exec: %d", st)
	}
	after := scrape()

	const exec = "POST /v1/sandboxes/{sandboxId}/commands"
	if d := counter(after, "sandboxd_http_requests_total", "operation", exec, "code", "200") -
		counter(before, "sandboxd_http_requests_total", "operation", exec, "code", "200"); d != 3 {
		t.Errorf("exec answered 200: counter moved by %v, want 3", d)
	}
	if d := counter(after, "sandboxd_http_requests_total", "operation", exec, "code", "409"); d != 1 {
		t.Errorf("exec answered 409: %v, want 1", d)
	}
	if n := histCount(after, "sandboxd_http_request_duration_seconds", "operation", exec); n != 4 {
		t.Errorf("exec latency observations %d, want 4", n)
	}
	if n := histCount(after, "sandboxd_provider_operation_duration_seconds", "operation", "exec"); n != 3 {
		t.Errorf("provider exec observations %d, want 3", n)
	}
	if n := histCount(after, "sandboxd_provider_operation_duration_seconds", "operation", "allocate"); n != 1 {
		t.Errorf("provider allocate observations %d, want 1", n)
	}
	if v := gauge(after, "sandboxd_sandboxes", "state", "ready", "provider", "host"); v != 1 {
		t.Errorf("ready sandboxes %v, want 1", v)
	}
	if v := gauge(before, "sandboxd_sandboxes", "state", "ready", "provider", "host"); v != 0 {
		t.Errorf("ready sandboxes before %v, want 0", v)
	}
	if h := gauge(after, "sandboxd_event_log_head_cursor"); h < 4 {
		t.Errorf("event head %v after a create, its states and three commands", h)
	}
	if n := histCount(after, "sandboxd_store_commit_duration_seconds"); n <= histCount(before, "sandboxd_store_commit_duration_seconds") {
		t.Errorf("store commits did not move: %d", n)
	}
	// The audit log: a line for the create, one for each command, by the token's name.
	deadline = time.Now().Add(5 * time.Second)
	for !(strings.Count(logs.String(), `msg=audit who=ci-runner operation="POST /v1/sandboxes/{sandboxId}/commands"`) == 4 &&
		strings.Contains(logs.String(), `msg=audit who=ci-runner operation="POST /v1/sandboxes" sandbox="" status=201`)) {
		if time.Now().After(deadline) {
			t.Fatalf("audit lines missing:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// An operation whose path names another resource than a sandbox names it too, whatever its answer
	// (the host provider keeps no volumes or snapshots: 422).
	call("DELETE", "/v1/volumes/cache", "")
	call("DELETE", "/v1/snapshots/snap_0123456789abcdef", "")
	call("POST", "/v1/sandboxes/"+string(sb.ID)+"/processes/4242/signal", `{"expectedGeneration":1,"signal":"TERM"}`)
	for _, line := range []string{
		`msg=audit who=ci-runner operation="DELETE /v1/volumes/{volumeName}" sandbox="" volume=cache status=422`,
		`msg=audit who=ci-runner operation="DELETE /v1/snapshots/{snapshotId}" sandbox="" snapshot=snap_0123456789abcdef status=422`,
		`msg=audit who=ci-runner operation="POST /v1/sandboxes/{sandboxId}/processes/{pid}/signal" sandbox=` + string(sb.ID) + ` pid=4242 status=404`,
	} {
		for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), line); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no audit line %s in:\n%s", line, logs.String())
			}
		}
	}
	if strings.Contains(logs.String(), "metrics-token-1") {
		t.Error("a token is in the log")
	}
	// The host provider reads no usage: stats is refused before it is asked.
	if st, body, _ := call("GET", "/v1/sandboxes/"+string(sb.ID)+"/stats", ""); st != 422 {
		t.Errorf("stats on host: %d %s", st, body)
	}
}

// find returns the metric of a family with the given label pairs, or nil.
func find(fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			ok := false
			for _, l := range m.Label {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					ok = true
				}
			}
			if !ok {
				continue next
			}
		}
		return m
	}
	return nil
}

func counter(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	if m := find(fams, name, labels...); m != nil {
		return m.GetCounter().GetValue()
	}
	return 0
}

func gauge(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	if m := find(fams, name, labels...); m != nil {
		return m.GetGauge().GetValue()
	}
	return -1
}

func histCount(fams map[string]*dto.MetricFamily, name string, labels ...string) uint64 {
	if m := find(fams, name, labels...); m != nil {
		return m.GetHistogram().GetSampleCount()
	}
	return 0
}
