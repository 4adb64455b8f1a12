package client

import (
	"context"
	"encoding/json"

	"github.com/sandboxd/sandbox"
)

// NetworkPolicy is a sandbox's egress policy (the sandboxd.network key of spec.extensions).
type NetworkPolicy struct {
	Egress string   `json:"egress,omitempty"` // "deny" or "allow"; empty: the daemon's default
	Allow  []string `json:"allow,omitempty"`  // IPv4 CIDRs, addresses, names, "*.wildcards"
	Deny   []string `json:"deny,omitempty"`
}

// Network is a sandbox's network now: the policy that holds, what its rules counted, its recent
// denials (newest first), and the generation it is of.
type Network struct {
	Generation         sandbox.Generation      `json:"generation"`
	Policy             NetworkPolicy           `json:"policy"`
	AllowedConnections uint64                  `json:"allowedConnections"`
	DeniedConnections  uint64                  `json:"deniedConnections"`
	Denials            []sandbox.NetworkDenial `json:"denials"`
}

// Network returns a ready or paused sandbox's network. Errors: ErrNotFound, ErrInvalidState,
// ErrUnsupportedCapability, ErrProviderUnavailable.
func (c *Client) Network(ctx context.Context, id sandbox.ID) (*Network, error) {
	var n Network
	if err := c.do(ctx, call{method: "GET", path: sandboxPath(id) + "/network", safe: true}, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// SetNetwork makes policy generation gen's for every new connection. Errors: ErrInvalidRequest,
// ErrNotFound, ErrGenerationConflict, ErrInvalidState, ErrUnsupportedCapability,
// ErrProviderUnavailable.
func (c *Client) SetNetwork(ctx context.Context, id sandbox.ID, gen sandbox.Generation, policy NetworkPolicy) (*Network, error) {
	raw, err := json.Marshal(policy)
	if err != nil {
		return nil, err
	}
	body := struct {
		ExpectedGeneration sandbox.Generation `json:"expectedGeneration"`
		Policy             json.RawMessage    `json:"policy"`
	}{gen, raw}
	var n Network
	if err := c.do(ctx, call{method: "PUT", path: sandboxPath(id) + "/network", body: body}, &n); err != nil {
		return nil, err
	}
	return &n, nil
}
