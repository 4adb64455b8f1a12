package client_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/httpapi"
	"github.com/sandboxd/sandbox/internal/metrics"
	"github.com/sandboxd/sandbox/internal/testenv/stack"
	"github.com/sandboxd/sandbox/provider/host"
)

// TestLifetime: a spec's lifetime set with WithLifetime is recorded by the daemon, and LifetimeOf reads
// it back: the deadline is the generation's start plus its time to live; a sandbox without one has
// none; a lifetime the daemon refuses is an invalid request.
func TestLifetime(t *testing.T) {
	c := newClient(t, exampleURL)
	ctx := t.Context()
	spec := client.WithLifetime(sandbox.Spec{ClientRequestID: client.NewRequestID()},
		client.Lifetime{TTLSeconds: 3600, IdleSeconds: 600, OnIdle: "terminate"})
	sb, err := c.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	lt, err := client.LifetimeOf(sb)
	if err != nil || lt == nil {
		t.Fatalf("recorded lifetime %+v %v", lt, err)
	}
	if lt.TTLSeconds != 3600 || lt.ExpiresAt == nil || !lt.ExpiresAt.Equal(lt.Since.Add(time.Hour)) ||
		lt.IdleSeconds != 600 || lt.OnIdle != "terminate" || lt.ResumeOnCall {
		t.Errorf("recorded lifetime %+v", lt)
	}
	no := false
	paused, err := c.Create(ctx, client.WithLifetime(sandbox.Spec{ClientRequestID: client.NewRequestID()},
		client.Lifetime{IdleSeconds: 60, ResumeOnCall: &no}))
	if err != nil {
		t.Fatal(err)
	}
	if lt, err := client.LifetimeOf(paused); err != nil || lt == nil || lt.OnIdle != "pause" || lt.ResumeOnCall || lt.ExpiresAt != nil {
		t.Errorf("an idle bound alone, pausing, not resumed by a call: %+v %v", lt, err)
	}
	plain := ready(t, c)
	if lt, err := client.LifetimeOf(plain); err != nil || lt != nil {
		t.Errorf("a sandbox that asked for no lifetime: %+v %v", lt, err)
	}
	if _, err := c.Create(ctx, client.WithLifetime(sandbox.Spec{}, client.Lifetime{IdleSeconds: 60, OnIdle: "sleep"})); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Errorf("onIdle sleep: %v, want invalid request", err)
	}
	for _, s := range []*sandbox.Sandbox{sb, paused, plain} {
		if _, err := c.Terminate(ctx, s.ID, s.Generation); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMetrics: Metrics returns the daemon's /metrics, whose counters move with the calls the client
// makes; without the token it is refused like any call.
func TestMetrics(t *testing.T) {
	prov, err := host.New(host.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	tokens, err := httpapi.NewTokens("metrics-client-token")
	if err != nil {
		t.Fatal(err)
	}
	st := stack.New(t, prov, stack.API(func(c *httpapi.Config) {
		c.Metrics, c.ObserveRequest, c.Tokens = m.Handler(), m.ObserveRequest, tokens
	}))
	c := newClient(t, st.URL, client.WithToken("metrics-client-token"))
	for range 3 {
		if _, err := c.Runtime(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	text, err := c.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	const line = `sandboxd_http_requests_total{operation="GET /v1/runtime",code="200"} 3`
	if !strings.Contains(text, line+"\n") {
		t.Errorf("no %s in:\n%s", line, text)
	}
	if _, err := newClient(t, st.URL).Metrics(t.Context()); !errors.Is(err, sandbox.ErrUnauthenticated) {
		t.Errorf("metrics without the token: %v, want unauthenticated", err)
	}
}
