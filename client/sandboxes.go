package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

// Health checks that the daemon accepts requests.
func (c *Client) Health(ctx context.Context) error {
	return c.do(ctx, call{method: "GET", path: "/healthz", safe: true}, nil)
}

// Runtime returns the protocol version and the provider's manifest. Errors: ErrProviderProtocol,
// ErrProviderUnavailable.
func (c *Client) Runtime(ctx context.Context) (*api.RuntimeInfo, error) {
	var info api.RuntimeInfo
	if err := c.do(ctx, call{method: "GET", path: "/v1/runtime", safe: true}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// NewRequestID returns a random clientRequestId.
func NewRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "req-" + hex.EncodeToString(b[:])
}

// Create asks for a sandbox. An empty spec.ClientRequestID is filled with NewRequestID, so that the create
// can be retried safely: a repeat with the same id and spec returns the same sandbox. The sandbox is
// returned as soon as it is recorded (requested, starting or ready); WaitReady waits for it.
// Errors: ErrInvalidRequest, ErrIdempotencyConflict, ErrUnsupportedCapability, ErrProviderProtocol,
// ErrProviderUnavailable.
func (c *Client) Create(ctx context.Context, spec sandbox.Spec) (*sandbox.Sandbox, error) {
	if spec.ClientRequestID == "" {
		spec.ClientRequestID = NewRequestID()
	}
	var sb sandbox.Sandbox
	if err := c.do(ctx, call{method: "POST", path: "/v1/sandboxes", body: spec, safe: true}, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// List returns every sandbox the daemon knows.
func (c *Client) List(ctx context.Context) ([]*sandbox.Sandbox, error) {
	var out api.SandboxList
	if err := c.do(ctx, call{method: "GET", path: "/v1/sandboxes", safe: true}, &out); err != nil {
		return nil, err
	}
	return out.Sandboxes, nil
}

// Get returns one sandbox. Errors: ErrNotFound.
func (c *Client) Get(ctx context.Context, id sandbox.ID) (*sandbox.Sandbox, error) {
	var sb sandbox.Sandbox
	if err := c.do(ctx, call{method: "GET", path: sandboxPath(id), safe: true}, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// action posts one lifecycle action; body carries the generation it is fenced by.
func (c *Client) action(ctx context.Context, id sandbox.ID, a sandbox.Action, body any) (*sandbox.Sandbox, error) {
	var sb sandbox.Sandbox
	if err := c.do(ctx, call{method: "POST", path: sandboxPath(id) + "/actions/" + string(a), body: body}, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Pause freezes generation gen of a ready sandbox. Errors: ErrNotFound, ErrGenerationConflict,
// ErrInvalidState, ErrUnsupportedCapability (no pauseResume), ErrProviderUnavailable.
func (c *Client) Pause(ctx context.Context, id sandbox.ID, gen sandbox.Generation) (*sandbox.Sandbox, error) {
	return c.action(ctx, id, sandbox.ActionPause, api.GenerationRequest{ExpectedGeneration: gen})
}

// Resume thaws generation gen of a paused sandbox. Errors as Pause.
func (c *Client) Resume(ctx context.Context, id sandbox.ID, gen sandbox.Generation) (*sandbox.Sandbox, error) {
	return c.action(ctx, id, sandbox.ActionResume, api.GenerationRequest{ExpectedGeneration: gen})
}

// Terminate releases generation gen. It works in every state but terminated, which it leaves as is.
// Errors: ErrNotFound, ErrGenerationConflict.
func (c *Client) Terminate(ctx context.Context, id sandbox.ID, gen sandbox.Generation) (*sandbox.Sandbox, error) {
	return c.action(ctx, id, sandbox.ActionTerminate, api.GenerationRequest{ExpectedGeneration: gen})
}

// Recreate starts generation gen+1 of a terminated sandbox from spec; an empty spec.ClientRequestID is
// filled with NewRequestID. Errors: ErrNotFound, ErrGenerationConflict, ErrInvalidState,
// ErrIdempotencyConflict, ErrUnsupportedCapability, ErrProviderUnavailable.
func (c *Client) Recreate(ctx context.Context, id sandbox.ID, gen sandbox.Generation, spec sandbox.Spec) (*sandbox.Sandbox, error) {
	if spec.ClientRequestID == "" {
		spec.ClientRequestID = NewRequestID()
	}
	return c.action(ctx, id, sandbox.ActionRecreate, api.RecreateRequest{ExpectedGeneration: gen, Spec: spec})
}

// Reconcile asks the provider for a fresh observation of the current generation and applies it.
// Errors: ErrNotFound, ErrProviderProtocol, ErrProviderUnavailable.
func (c *Client) Reconcile(ctx context.Context, id sandbox.ID) (*sandbox.Sandbox, error) {
	return c.action(ctx, id, "reconcile", nil)
}

func sandboxPath(id sandbox.ID) string { return "/v1/sandboxes/" + url.PathEscape(string(id)) }
