package kubernetes

import (
	"fmt"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/netpolicy"
)

var _ sandbox.SpecValidator = (*Provider)(nil)

// ValidateSpec refuses a network policy the provider would not keep: its sandboxes get no egress at
// all (with NetworkPolicy, every egress denied; without, the provider has no networkPolicy and the
// core refuses the key), so a policy that lets anything out is a 422, never a silent deny.
// Errors: ErrInvalidRequest for a malformed policy, ErrUnsupportedCapability.
func (p *Provider) ValidateSpec(spec sandbox.Spec) error {
	raw, ok := spec.Extensions[netpolicy.ExtensionKey]
	if !ok {
		return nil
	}
	rules, err := netpolicy.Parse(raw, netpolicy.EgressDeny)
	if err != nil {
		return err
	}
	if rules.Needs() {
		return fmt.Errorf("%s: sandboxes on this provider have no egress: %w", netpolicy.ExtensionKey, sandbox.ErrUnsupportedCapability)
	}
	return nil
}
