package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/netpolicy"
)

// With Config.NetworkPolicy, each sandbox Pod has a NetworkPolicy of the same name that selects it
// alone: no ingress at all, and egress as its sandboxd.network policy says, written as ipBlock peers
// (CIDR rules only: the provider runs no resolver, so a rule by name is refused). The object is made
// before the Pod, so the Pod never runs without it, and is then owned by the Pod, so that the
// cluster's garbage collector removes it with the Pod whoever deletes that; Release deletes it too,
// and a policy left without its Pod (a crash between the two) is one of Resources' orphans. The
// policy that holds is kept in an annotation of the object. The API server keeps NetworkPolicy
// objects whether or not the cluster's network plugin enforces them: enforcement is the cluster's.

var (
	_ sandbox.SpecValidator     = (*Provider)(nil)
	_ sandbox.NetworkController = (*Provider)(nil)
)

// annotationPolicy holds, on a NetworkPolicy, the sandboxd.network policy it says (explicit form).
const annotationPolicy = "sandboxd.io/policy"

// ValidateSpec refuses, before anything is recorded, what the provider would not keep: a network
// policy with a rule by name (the provider resolves no names for its sandboxes), or one that lets
// anything out when the provider has no NetworkPolicy to say so; and volume mount paths the Pod
// uses itself. Errors: ErrInvalidRequest for a malformed value, ErrUnsupportedCapability.
func (p *Provider) ValidateSpec(spec sandbox.Spec) error {
	if raw, ok := spec.Extensions[netpolicy.ExtensionKey]; ok {
		if _, err := p.rulesOf(raw); err != nil {
			return err
		}
	}
	return checkMountPaths(spec)
}

// rulesOf checks a sandboxd.network value for this provider.
func (p *Provider) rulesOf(raw json.RawMessage) (netpolicy.Rules, error) {
	rules, err := netpolicy.Parse(raw, netpolicy.EgressDeny)
	if err != nil {
		return rules, err
	}
	if len(rules.AllowNames)+len(rules.DenyNames) > 0 {
		return rules, fmt.Errorf("%s: rules by name (%v): the kubernetes provider keeps CIDR rules only: %w",
			netpolicy.ExtensionKey, append(rules.AllowNames, rules.DenyNames...), sandbox.ErrUnsupportedCapability)
	}
	if pr, ok := rules.AllowsIPv6(); ok {
		return rules, fmt.Errorf("%s: allow rule %s: the kubernetes provider writes IPv4 blocks only: %w", netpolicy.ExtensionKey, pr, sandbox.ErrUnsupportedCapability)
	}
	if !p.cfg.NetworkPolicy && rules.Needs() {
		return rules, fmt.Errorf("%s: this provider makes no NetworkPolicy (--network-policy) and cannot limit egress: %w",
			netpolicy.ExtensionKey, sandbox.ErrUnsupportedCapability)
	}
	return rules, nil
}

// Destinations no rule opens, and the link-local range only a rule naming it opens (netpolicy.Explicit).
var (
	neverPrefixes = []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"),
		netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("224.0.0.0/3"),
	}
	linkLocal = netip.MustParsePrefix("169.254.0.0/16")
	anywhere  = netip.MustParsePrefix("0.0.0.0/0")
)

// egressPeers writes rules as NetworkPolicy peers, which can only allow: each allowed CIDR becomes an
// ipBlock whose except holds the deny rules inside it (and the ranges it may not open), and an allow
// that a deny rule covers is left out, so deny beats allow exactly. egress "allow" is 0.0.0.0/0 less
// the deny rules, link-local and reserved ranges, beside the explicit rules that open link-local
// addresses. No peer at all denies every egress.
func egressPeers(r netpolicy.Rules) []networkingv1.NetworkPolicyPeer {
	var peers []networkingv1.NetworkPolicyPeer
	add := func(allow netip.Prefix) {
		closed := append(slices.Clone(r.Deny), neverPrefixes...)
		if !netpolicy.Explicit(allow) {
			closed = append(closed, linkLocal)
		}
		var except []netip.Prefix
		for _, d := range closed {
			switch {
			case d.Bits() <= allow.Bits() && d.Contains(allow.Addr()):
				return // wholly denied
			case d.Bits() > allow.Bits() && allow.Contains(d.Addr()):
				except = append(except, d)
			}
		}
		block := &networkingv1.IPBlock{CIDR: allow.String()}
		for _, e := range outermost(except) {
			block.Except = append(block.Except, e.String())
		}
		for _, pe := range peers {
			if pe.IPBlock.CIDR == block.CIDR {
				return
			}
		}
		peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: block})
	}
	if r.Egress {
		add(anywhere)
	}
	for _, a := range r.Allow {
		if !r.Egress || netpolicy.Explicit(a) {
			add(a)
		}
	}
	return peers
}

// outermost is ps sorted, without the prefixes another of ps holds.
func outermost(ps []netip.Prefix) []netip.Prefix {
	s := slices.Clone(ps)
	slices.SortFunc(s, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	var out []netip.Prefix
	for _, p := range s {
		if n := len(out); n > 0 && out[n-1].Bits() <= p.Bits() && out[n-1].Contains(p.Addr()) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// policySpec is the NetworkPolicy spec of ref's Pod under rules: its Pod alone, no ingress, egress to
// rules' peers.
func (p *Provider) policySpec(ref sandbox.Ref, rules netpolicy.Rules) networkingv1.NetworkPolicySpec {
	spec := networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{
			labelInstance: p.cfg.Instance, labelID: idLabel(ref.ID), labelGeneration: strconv.FormatInt(int64(ref.Generation), 10),
		}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
	}
	if peers := egressPeers(rules); len(peers) > 0 {
		spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: peers}}
	}
	return spec
}

// ensurePolicy makes the NetworkPolicy of ref's Pod from the spec's policy, unless it exists: the one
// that exists may hold a policy set since (SetNetworkPolicy).
func (p *Provider) ensurePolicy(ctx context.Context, ref sandbox.Ref, name string, spec sandbox.Spec) error {
	rules, err := p.rulesOf(spec.Extensions[netpolicy.ExtensionKey])
	if err != nil {
		return err
	}
	np, err := p.policyObject(ref, name, rules)
	if err != nil {
		return err
	}
	_, err = p.cs.NetworkingV1().NetworkPolicies(p.cfg.Namespace).Create(ctx, np, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		if apierrors.IsInvalid(err) {
			return fmt.Errorf("kubernetes: NetworkPolicy for %s: %v: %w", ref, err, sandbox.ErrInvalidRequest)
		}
		return fmt.Errorf("kubernetes: NetworkPolicy for %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
	}
	return nil
}

func (p *Provider) policyObject(ref sandbox.Ref, name string, rules netpolicy.Rules) (*networkingv1.NetworkPolicy, error) {
	explicit, err := json.Marshal(rules.Policy())
	if err != nil {
		return nil, err
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: p.cfg.Namespace,
			Labels: map[string]string{
				labelManagedBy: managedBy, labelInstance: p.cfg.Instance, labelID: idLabel(ref.ID),
				labelGeneration: strconv.FormatInt(int64(ref.Generation), 10),
			},
			Annotations: map[string]string{annotationID: string(ref.ID), annotationPolicy: string(explicit)},
		},
		Spec: p.policySpec(ref, rules),
	}, nil
}

// ownPolicy makes pod the owner of its NetworkPolicy, so that the policy goes with the Pod.
func (p *Provider) ownPolicy(ctx context.Context, pod *corev1.Pod) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
	}}}})
	if err != nil {
		return err
	}
	_, err = p.cs.NetworkingV1().NetworkPolicies(p.cfg.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("kubernetes: own NetworkPolicy %s: %v: %w", pod.Name, err, sandbox.ErrProviderUnavailable)
	}
	return nil
}

// NetworkStatus answers the policy ref's NetworkPolicy says. The provider sees no connections: the
// counts are zero and there are no denials. Errors: ErrNotFound (no Pod), ErrProviderUnavailable
// (the Pod's NetworkPolicy is missing or unreadable).
func (p *Provider) NetworkStatus(ctx context.Context, ref sandbox.Ref, _ sandbox.Spec) (sandbox.NetworkStatus, error) {
	b, err := p.usable(ctx, ref)
	if err != nil {
		return sandbox.NetworkStatus{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	np, err := p.cs.NetworkingV1().NetworkPolicies(p.cfg.Namespace).Get(ctx, b.name, metav1.GetOptions{})
	if err != nil {
		return sandbox.NetworkStatus{}, fmt.Errorf("kubernetes: NetworkPolicy %s: %v: %w", b.name, err, sandbox.ErrProviderUnavailable)
	}
	return statusOf(np)
}

func statusOf(np *networkingv1.NetworkPolicy) (sandbox.NetworkStatus, error) {
	raw := json.RawMessage(np.Annotations[annotationPolicy])
	if !json.Valid(raw) {
		return sandbox.NetworkStatus{}, fmt.Errorf("kubernetes: NetworkPolicy %s has no valid %s annotation: %w", np.Name, annotationPolicy, sandbox.ErrProviderProtocol)
	}
	return sandbox.NetworkStatus{Policy: raw, Denials: []sandbox.NetworkDenial{}}, nil
}

// SetNetworkPolicy writes policy into ref's NetworkPolicy (making it again if it went). Connections
// open go on or not as the cluster's network plugin decides. Errors: ErrInvalidRequest,
// ErrUnsupportedCapability (rules by name), ErrNotFound (no Pod), ErrProviderUnavailable.
func (p *Provider) SetNetworkPolicy(ctx context.Context, ref sandbox.Ref, _ sandbox.Spec, policy json.RawMessage) (sandbox.NetworkStatus, error) {
	rules, err := p.rulesOf(policy)
	if err != nil {
		return sandbox.NetworkStatus{}, err
	}
	b, err := p.usable(ctx, ref)
	if err != nil {
		return sandbox.NetworkStatus{}, err
	}
	want, err := p.policyObject(ref, b.name, rules)
	if err != nil {
		return sandbox.NetworkStatus{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	nps := p.cs.NetworkingV1().NetworkPolicies(p.cfg.Namespace)
	var got *networkingv1.NetworkPolicy
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		np, err := nps.Get(ctx, b.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			p.log.Warn("sandbox NetworkPolicy missing; making it again", "policy", b.name)
			got, err = nps.Create(ctx, want, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		np.Spec = want.Spec
		if np.Annotations == nil {
			np.Annotations = map[string]string{}
		}
		np.Annotations[annotationPolicy] = want.Annotations[annotationPolicy]
		got, err = nps.Update(ctx, np, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return sandbox.NetworkStatus{}, fmt.Errorf("kubernetes: set NetworkPolicy %s: %v: %w", b.name, err, sandbox.ErrProviderUnavailable)
	}
	if len(got.OwnerReferences) == 0 {
		if pod, err := p.getPod(ctx, b.name); err == nil && pod != nil {
			if err := p.ownPolicy(ctx, pod); err != nil {
				return sandbox.NetworkStatus{}, err
			}
		}
	}
	return statusOf(got)
}

// deletePolicy deletes the named NetworkPolicy; an absent one is no error.
func (p *Provider) deletePolicy(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	err := p.cs.NetworkingV1().NetworkPolicies(p.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes: delete NetworkPolicy %s: %v: %w", name, err, sandbox.ErrProviderUnavailable)
	}
	return nil
}

// policyOrphans lists the generations whose NetworkPolicy has no Pod: a provider that stopped between
// making the policy and the Pod.
func (p *Provider) policyOrphans(ctx context.Context, pods []sandbox.Ref) ([]sandbox.Ref, error) {
	list, err := p.cs.NetworkingV1().NetworkPolicies(p.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: p.selector.String()})
	if err != nil {
		return nil, fmt.Errorf("kubernetes: list NetworkPolicies: %v: %w", err, sandbox.ErrProviderUnavailable)
	}
	var out []sandbox.Ref
	for i := range list.Items {
		ref, ok := refOfMeta(&list.Items[i].ObjectMeta)
		if ok && !slices.Contains(pods, ref) {
			out = append(out, ref)
		}
	}
	return out, nil
}
