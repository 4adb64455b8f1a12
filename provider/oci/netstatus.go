package oci

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/netpolicy"
)

var _ sandbox.NetworkController = (*Provider)(nil)

// maxDenialsShown bounds the denials a status lists.
const maxDenialsShown = 50

// NetworkStatus returns the policy that holds for ref (the last one set, or spec's), what its rules
// counted and its recent denials. Errors: ErrNotFound, ErrProviderUnavailable.
func (p *Provider) NetworkStatus(ctx context.Context, ref sandbox.Ref, spec sandbox.Spec) (sandbox.NetworkStatus, error) {
	b := p.box(ref)
	b.mu.Lock()
	defer b.mu.Unlock()
	return p.networkStatusLocked(b, spec)
}

func (p *Provider) networkStatusLocked(b *box, spec sandbox.Spec) (sandbox.NetworkStatus, error) {
	if _, err := os.Stat(b.l.meta()); err != nil {
		return sandbox.NetworkStatus{}, fmt.Errorf("network of %s: %w", b.ref, sandbox.ErrNotFound)
	}
	st, err := readNetState(b.l)
	switch {
	case os.IsNotExist(err):
		// Never changed, and on loopback only: the spec's policy holds.
		if st.Rules, err = netpolicy.Parse(spec.Extensions[netpolicy.ExtensionKey], p.defaultEgress()); err != nil {
			return sandbox.NetworkStatus{}, err
		}
	case err != nil:
		return sandbox.NetworkStatus{}, fmt.Errorf("network of %s: %v: %w", b.ref, err, sandbox.ErrProviderUnavailable)
	}
	policy, err := json.Marshal(st.Rules.Policy())
	if err != nil {
		return sandbox.NetworkStatus{}, err
	}
	out := sandbox.NetworkStatus{Policy: policy, Denials: []sandbox.NetworkDenial{}}
	if st.Iface == "" || p.net == nil {
		return out, nil
	}
	fs, err := p.net.fw.Status(st.Iface)
	if err != nil {
		return sandbox.NetworkStatus{}, fmt.Errorf("network of %s: %v: %w", b.ref, err, sandbox.ErrProviderUnavailable)
	}
	out.AllowedConnections, out.DeniedConnections = fs.Allowed, fs.Denied
	var names map[netip.Addr]string
	var refused []netpolicy.Refusal
	if p.net.dns != nil {
		names, refused = p.net.dns.Seen(st.Addr)
	}
	for _, d := range fs.Denials {
		out.Denials = append(out.Denials, sandbox.NetworkDenial{Time: d.At, Destination: d.Addr.String(), Name: names[d.Addr]})
	}
	for _, r := range refused {
		out.Denials = append(out.Denials, sandbox.NetworkDenial{Time: r.At, Name: r.Name})
	}
	slices.SortStableFunc(out.Denials, func(a, b sandbox.NetworkDenial) int { return b.Time.Compare(a.Time) })
	if len(out.Denials) > maxDenialsShown {
		out.Denials = out.Denials[:maxDenialsShown]
	}
	return out, nil
}

// SetNetworkPolicy makes policy ref's for every new connection: its rules are replaced in one
// transaction (connections open go on), a sandbox on loopback only gets its network now when the
// policy lets something out, and one with a network keeps it (denying all) when the policy no longer
// does. Errors: ErrInvalidRequest, ErrUnsupportedCapability, ErrNotFound, ErrProviderUnavailable.
func (p *Provider) SetNetworkPolicy(ctx context.Context, ref sandbox.Ref, spec sandbox.Spec, policy json.RawMessage) (sandbox.NetworkStatus, error) {
	rules, err := p.networkRules(sandbox.Spec{Extensions: map[string]json.RawMessage{netpolicy.ExtensionKey: policy}})
	if err != nil {
		return sandbox.NetworkStatus{}, err
	}
	b := p.box(ref)
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := os.Stat(b.l.meta()); err != nil {
		return sandbox.NetworkStatus{}, fmt.Errorf("network of %s: %w", ref, sandbox.ErrNotFound)
	}
	st, err := readNetState(b.l)
	switch {
	case err == nil && st.Iface != "":
		// The firewall first: its new epoch voids what a query let through under the old rules
		// would learn, before and after the resolver has the new ones.
		var epoch uint64
		if epoch, err = p.net.fw.Set(st.Iface, st.addrs(), rules); err == nil {
			if p.net.dns != nil {
				p.net.dns.Set(st.addrs(), st.Iface, rules, epoch)
			}
			st.Rules = rules
			err = writeJSONFile(b.l.netFile(), st)
		}
	case err != nil && !os.IsNotExist(err):
	case rules.Needs():
		err = p.attachNetwork(b, rules)
	default:
		err = writeJSONFile(b.l.netFile(), netState{Rules: rules})
	}
	if err != nil {
		return sandbox.NetworkStatus{}, fmt.Errorf("network of %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
	}
	return p.networkStatusLocked(b, spec)
}
