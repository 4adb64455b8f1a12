package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/testenv/corestack"
	"github.com/sandboxd/sandbox/provider/host"
)

// lifetimeEnv is a runtime whose store and host provider outlive it, so a test can restart it, on an
// injected clock, checking lifetimes every few milliseconds of real time.
type lifetimeEnv struct {
	t    *testing.T
	dir  string
	prov *host.Provider
	clk  *testenv.Clock
	cfg  core.LifetimeConfig
	st   *corestack.Stack
}

func newLifetimeEnv(t *testing.T, cfg core.LifetimeConfig) *lifetimeEnv {
	dir := t.TempDir()
	prov, err := host.New(host.Config{Dir: filepath.Join(dir, "host")})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Interval = 5 * time.Millisecond
	e := &lifetimeEnv{t: t, dir: dir, prov: prov, clk: testenv.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), cfg: cfg}
	e.start()
	t.Cleanup(func() { e.st.Close() })
	return e
}

// start opens the runtime over the same store and provider.
func (e *lifetimeEnv) start() {
	st, err := corestack.Open(e.dir, e.prov, corestack.Core(func(c *core.Config) {
		c.Now, c.ReconcileInterval, c.Lifetimes = e.clk.Now, -1, e.cfg
	}))
	if err != nil {
		e.t.Fatal(err)
	}
	e.st = st
}

// restart closes the runtime and its store, as a daemon that stops, and opens them again.
func (e *lifetimeEnv) restart() {
	if err := e.st.Close(); err != nil {
		e.t.Fatal(err)
	}
	e.start()
}

func (e *lifetimeEnv) create(lifetime string) *sandbox.Sandbox {
	e.t.Helper()
	sp := sandbox.Spec{ClientRequestID: string(sandbox.NewID())}
	if lifetime != "" {
		sp.Extensions = map[string]json.RawMessage{core.LifetimeKey: json.RawMessage(lifetime)}
	}
	sb, err := e.st.Runtime.Create(context.Background(), sp)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.wait(sb.ID, sandbox.StateReady)
}

func (e *lifetimeEnv) get(id sandbox.ID) *sandbox.Sandbox {
	e.t.Helper()
	sb, err := e.st.Runtime.Get(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return sb
}

func (e *lifetimeEnv) wait(id sandbox.ID, want sandbox.State) *sandbox.Sandbox {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sb := e.get(id)
		if sb.State == want {
			return sb
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("sandbox %s is %s, want %s", id, sb.State, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// still checks that the sandbox stays in want while the checker runs many times.
func (e *lifetimeEnv) still(id sandbox.ID, want sandbox.State) {
	e.t.Helper()
	time.Sleep(60 * time.Millisecond) // a dozen checks
	if sb := e.get(id); sb.State != want {
		e.t.Fatalf("sandbox %s is %s, want still %s", id, sb.State, want)
	}
}

// reasons lists the "from>to:reason" of the sandbox's state changes.
func (e *lifetimeEnv) reasons(id sandbox.ID) []string {
	e.t.Helper()
	evs, err := e.st.Runtime.Events(context.Background(), sandbox.EventQuery{SandboxID: id})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		if ev.Type != sandbox.EventStateChanged {
			continue
		}
		var d sandbox.StateChangedData
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, string(d.From)+">"+string(d.To)+":"+d.Reason)
	}
	return out
}

func count(list []string, sub string) int {
	n := 0
	for _, s := range list {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

// TestTTLFiresOnceAtItsTimeAcrossARestart: a sandbox with a time to live is terminated when the
// injected clock reaches it, not before, also when the runtime restarted in between; the deadline is
// in its providerExtensions; the transition is one state_changed event with reason ttl_expired, and
// checks after it change nothing.
func TestTTLFiresOnceAtItsTimeAcrossARestart(t *testing.T) {
	e := newLifetimeEnv(t, core.LifetimeConfig{})
	created := e.clk.Now()
	sb := e.create(`{"ttlSeconds": 60}`)
	lt := core.LifetimeOf(sb)
	if lt == nil || lt.ExpiresAt == nil || !lt.ExpiresAt.Equal(created.Add(time.Minute)) {
		t.Fatalf("recorded lifetime %+v, want expiry at %s", lt, created.Add(time.Minute))
	}
	plain := e.create("")
	e.clk.Add(30 * time.Second)
	e.still(sb.ID, sandbox.StateReady)
	e.restart()
	e.clk.Add(29 * time.Second)
	e.still(sb.ID, sandbox.StateReady)
	e.clk.Add(time.Second)
	e.wait(sb.ID, sandbox.StateTerminated)
	e.restart()
	e.clk.Add(time.Hour)
	e.still(sb.ID, sandbox.StateTerminated)
	if got := e.reasons(sb.ID); count(got, ":"+core.ReasonTTLExpired) != 1 || count(got, "ready>terminating:ttl_expired") != 1 {
		t.Errorf("state changes %v, want one ready>terminating with reason ttl_expired", got)
	}
	e.still(plain.ID, sandbox.StateReady)
}

// TestIdlePausesOnceAndResumesOnCall: a ready sandbox nobody uses for its idle bound is paused (reason
// idle), once; a request open on it (a stream) keeps it from idling however long it lasts; a command
// to the paused sandbox resumes it and runs; a restart counts as use and never cuts the bound short.
func TestIdlePausesOnceAndResumesOnCall(t *testing.T) {
	e := newLifetimeEnv(t, core.LifetimeConfig{})
	sb := e.create(`{"idleSeconds": 10}`)
	if lt := core.LifetimeOf(sb); lt == nil || lt.OnIdle != "pause" || !lt.ResumeOnCall {
		t.Fatalf("recorded lifetime %+v, want pause on idle and resume on call", lt)
	}
	e.clk.Add(5 * time.Second)
	e.st.Runtime.Active(sb.ID)() // a call five seconds in
	e.clk.Add(9 * time.Second)
	e.still(sb.ID, sandbox.StateReady)
	e.clk.Add(time.Second)
	e.wait(sb.ID, sandbox.StatePaused)
	e.clk.Add(time.Hour)
	e.still(sb.ID, sandbox.StatePaused)

	res, err := e.st.Runtime.Exec(context.Background(), sb.ID, sb.Generation, sandbox.Command{Argv: []string{"echo", "back"}, Timeout: time.Minute})
	if err != nil || string(res.Stdout) != "back\n" {
		t.Fatalf("exec on the paused sandbox: %+v %v", res, err)
	}
	e.wait(sb.ID, sandbox.StateReady)

	// A stream open for an hour: not idle.
	done := e.st.Runtime.Active(sb.ID)
	e.clk.Add(time.Hour)
	e.still(sb.ID, sandbox.StateReady)
	done()
	e.clk.Add(8 * time.Second)
	e.restart() // the restart is use: the bound starts again
	e.clk.Add(8 * time.Second)
	e.still(sb.ID, sandbox.StateReady)
	e.clk.Add(3 * time.Second)
	e.wait(sb.ID, sandbox.StatePaused)

	got := e.reasons(sb.ID)
	if count(got, "ready>pausing:idle") != 2 || count(got, "paused>resuming:resumed for exec") != 1 {
		t.Errorf("state changes %v, want two pauses for idle and one resume for the exec", got)
	}
}

// TestIdleTerminates: onIdle terminate, and resumeOnCall false leaves a paused sandbox paused.
func TestIdleTerminates(t *testing.T) {
	e := newLifetimeEnv(t, core.LifetimeConfig{})
	sb := e.create(`{"idleSeconds": 5, "onIdle": "terminate"}`)
	e.clk.Add(5 * time.Second)
	e.wait(sb.ID, sandbox.StateTerminated)
	if got := e.reasons(sb.ID); count(got, "ready>terminating:idle") != 1 {
		t.Errorf("state changes %v", got)
	}
	kept := e.create(`{"idleSeconds": 5, "resumeOnCall": false}`)
	e.clk.Add(5 * time.Second)
	e.wait(kept.ID, sandbox.StatePaused)
	_, err := e.st.Runtime.Exec(context.Background(), kept.ID, kept.Generation, sandbox.Command{Argv: []string{"true"}, Timeout: time.Minute})
	if !errors.Is(err, sandbox.ErrInvalidState) {
		t.Errorf("exec on a sandbox that does not resume on call: %v", err)
	}
}

// TestLifetimeDefaultsAndMaxima: the daemon's defaults apply to a sandbox that asks for nothing, its
// maximum bounds the default and refuses more (before anything is recorded), and a recreate records
// the new generation's own deadline.
func TestLifetimeDefaultsAndMaxima(t *testing.T) {
	e := newLifetimeEnv(t, core.LifetimeConfig{DefaultTTL: time.Hour, MaxTTL: 2 * time.Hour, MaxIdle: time.Minute})
	sb := e.create("")
	lt := core.LifetimeOf(sb)
	if lt == nil || lt.TTLSeconds != 3600 || lt.IdleSeconds != 60 {
		t.Fatalf("defaults: %+v, want a TTL of an hour and the idle maximum", lt)
	}
	for _, ask := range []string{`{"ttlSeconds": 7201}`, `{"idleSeconds": 61}`, `{"idleSeconds": 5, "onIdle": "sleep"}`} {
		_, err := e.st.Runtime.Create(context.Background(), sandbox.Spec{ClientRequestID: string(sandbox.NewID()),
			Extensions: map[string]json.RawMessage{core.LifetimeKey: json.RawMessage(ask)}})
		if !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Errorf("%s: %v, want invalid_request", ask, err)
		}
	}
	if list, _ := e.st.Runtime.List(context.Background()); len(list) != 1 {
		t.Errorf("%d sandboxes recorded, want the one", len(list))
	}
	// A recreate's generation gets its own deadline, from the recreate.
	if _, err := e.st.Runtime.Terminate(context.Background(), sb.ID, sb.Generation); err != nil {
		t.Fatal(err)
	}
	e.wait(sb.ID, sandbox.StateTerminated)
	e.clk.Add(30 * time.Minute)
	at := e.clk.Now()
	re, err := e.st.Runtime.Recreate(context.Background(), sb.ID, sb.Generation, sandbox.Spec{ClientRequestID: string(sandbox.NewID()),
		Extensions: map[string]json.RawMessage{core.LifetimeKey: json.RawMessage(`{"ttlSeconds": 100}`)}})
	if err != nil {
		t.Fatal(err)
	}
	re = e.wait(re.ID, sandbox.StateReady)
	if lt := core.LifetimeOf(re); lt == nil || lt.ExpiresAt == nil || !lt.ExpiresAt.Equal(at.Add(100*time.Second)) {
		t.Errorf("recreated generation's lifetime %+v, want expiry at %s", lt, at.Add(100*time.Second))
	}
}

// TestIdleWithARunningProcess: a sandbox whose background process runs is not idle, however long
// nobody calls; once the process has ended, the idle bound counts from the last time it was seen.
func TestIdleWithARunningProcess(t *testing.T) {
	e := newLifetimeEnv(t, core.LifetimeConfig{})
	sb := e.create(`{"idleSeconds": 10}`)
	ctx := context.Background()
	p, err := e.st.Runtime.StartProcess(ctx, sb.ID, sb.Generation, sandbox.ProcessSpec{Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	e.clk.Add(time.Hour)
	e.still(sb.ID, sandbox.StateReady)
	if err := e.st.Runtime.SignalProcess(ctx, sb.ID, sb.Generation, p.PID, "KILL"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := e.st.Runtime.WaitProcess(ctx, sb.ID, sb.Generation, p.PID, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the process did not end")
		}
	}
	e.still(sb.ID, sandbox.StateReady) // seen running a moment ago
	e.clk.Add(10 * time.Second)
	e.wait(sb.ID, sandbox.StatePaused)
}
