package sandbox

import (
	"context"
	"encoding/json"
	"time"
)

// NetworkStatus is a sandbox's network as it is now: the policy that holds (spec.extensions
// "sandboxd.network" at create, or the last one set since), what its rules counted, and its recent
// denials, newest first.
type NetworkStatus struct {
	Policy             json.RawMessage `json:"policy"`
	AllowedConnections uint64          `json:"allowedConnections"`
	DeniedConnections  uint64          `json:"deniedConnections"`
	Denials            []NetworkDenial `json:"denials"`
}

// NetworkDenial is a destination refused to a sandbox: an address (and the name it was resolved from,
// when known), or a name its resolver refused (no address then), with when it last was.
type NetworkDenial struct {
	Time        time.Time `json:"time"`
	Destination string    `json:"destination,omitempty"`
	Name        string    `json:"name,omitempty"`
}

// NetworkController is a provider whose sandboxes' network policy can be read and changed while they
// run (capability networkPolicy). spec is the sandbox's spec, whose policy holds until one is set.
type NetworkController interface {
	// NetworkStatus returns ref's network. Errors: ErrNotFound, ErrProviderUnavailable.
	NetworkStatus(ctx context.Context, ref Ref, spec Spec) (NetworkStatus, error)
	// SetNetworkPolicy makes policy (the value of a "sandboxd.network" key) ref's for every new
	// connection; connections open go on. Errors: ErrInvalidRequest, ErrUnsupportedCapability,
	// ErrNotFound, ErrProviderUnavailable.
	SetNetworkPolicy(ctx context.Context, ref Ref, spec Spec, policy json.RawMessage) (NetworkStatus, error)
}
