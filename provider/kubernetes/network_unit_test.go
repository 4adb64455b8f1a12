package kubernetes

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/netpolicy"
)

// block is a peer written as "cidr except a,b".
func blocks(t *testing.T, policy string) []string {
	t.Helper()
	r, err := netpolicy.Parse(json.RawMessage(policy), netpolicy.EgressDeny)
	if err != nil {
		t.Fatalf("%s: %v", policy, err)
	}
	out := []string{}
	for _, pe := range egressPeers(r) {
		s := pe.IPBlock.CIDR
		if len(pe.IPBlock.Except) > 0 {
			s += " except " + strings.Join(pe.IPBlock.Except, ",")
		}
		out = append(out, s)
	}
	return out
}

// TestEgressPeers: a policy's CIDR rules as NetworkPolicy peers, deny beating allow through except or
// by leaving the allow out, link-local opened only by a rule naming it, reserved ranges never.
func TestEgressPeers(t *testing.T) {
	for _, tc := range []struct {
		policy string
		want   []string
	}{
		{`{}`, []string{}},
		{`{"egress":"deny","deny":["10.0.0.0/8"]}`, []string{}},
		{`{"allow":["203.0.113.0/24","198.51.100.7"]}`, []string{"203.0.113.0/24", "198.51.100.7/32"}},
		{`{"allow":["203.0.113.0/24"],"deny":["203.0.113.9/32","203.0.113.128/25","203.0.113.130/32"]}`,
			[]string{"203.0.113.0/24 except 203.0.113.9/32,203.0.113.128/25"}},
		{`{"allow":["203.0.113.7"],"deny":["203.0.113.0/24"]}`, []string{}},
		{`{"allow":["10.0.0.0/8","10.1.0.0/16"],"deny":["10.1.0.0/16"]}`, []string{"10.0.0.0/8 except 10.1.0.0/16"}},
		{`{"egress":"allow"}`, []string{"0.0.0.0/0 except 0.0.0.0/8,127.0.0.0/8,169.254.0.0/16,224.0.0.0/3"}},
		{`{"egress":"allow","deny":["10.0.0.0/8","10.2.0.0/16"],"allow":["10.3.0.0/16"]}`,
			[]string{"0.0.0.0/0 except 0.0.0.0/8,10.0.0.0/8,127.0.0.0/8,169.254.0.0/16,224.0.0.0/3"}},
		{`{"egress":"allow","allow":["169.254.169.254"]}`,
			[]string{"0.0.0.0/0 except 0.0.0.0/8,127.0.0.0/8,169.254.0.0/16,224.0.0.0/3", "169.254.169.254/32"}},
		{`{"egress":"allow","allow":["169.254.169.254"],"deny":["169.254.0.0/16"]}`,
			[]string{"0.0.0.0/0 except 0.0.0.0/8,127.0.0.0/8,169.254.0.0/16,224.0.0.0/3"}},
		// 0.0.0.0/0 does not name link-local; the explicit /32 beside it does.
		{`{"allow":["0.0.0.0/0","169.254.169.254/32"]}`,
			[]string{"0.0.0.0/0 except 0.0.0.0/8,127.0.0.0/8,169.254.0.0/16,224.0.0.0/3", "169.254.169.254/32"}},
		{`{"allow":["169.0.0.0/8"]}`, []string{"169.0.0.0/8 except 169.254.0.0/16"}},
		// An IPv6 deny rule writes nothing: no IPv6 block is written, so IPv6 is denied anyway.
		{`{"egress":"allow","deny":["2001:db8::/32"]}`, []string{"0.0.0.0/0 except 0.0.0.0/8,127.0.0.0/8,169.254.0.0/16,224.0.0.0/3"}},
		{`{"allow":["127.0.0.1","224.0.0.1","0.0.0.0/8"]}`, []string{}},
		{`{"allow":["169.254.0.0/16"]}`, []string{"169.254.0.0/16"}},
	} {
		if got := blocks(t, tc.policy); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.policy, got, tc.want)
		}
	}
}

// TestValidateSpec: rules by name are 422, never a silent allow, and so are IPv6 allow rules; a
// malformed policy is 400; a policy
// that lets anything out is 422 on a provider that makes no NetworkPolicy; mount paths the Pod
// uses itself are 400.
func TestValidateSpec(t *testing.T) {
	withPolicy := testProvider(nil)
	withPolicy.cfg.NetworkPolicy = true
	without := testProvider(nil)
	spec := func(key, v string) sandbox.Spec {
		return sandbox.Spec{ClientRequestID: "x", Extensions: map[string]json.RawMessage{key: json.RawMessage(v)}}
	}
	net := func(v string) sandbox.Spec { return spec(netpolicy.ExtensionKey, v) }
	for _, tc := range []struct {
		p    *Provider
		spec sandbox.Spec
		want error
	}{
		{withPolicy, net(`{"allow":["10.0.0.0/8"],"deny":["10.1.0.0/16"]}`), nil},
		{withPolicy, net(`{"egress":"allow"}`), nil},
		{withPolicy, net(`{"allow":["pypi.org"]}`), sandbox.ErrUnsupportedCapability},
		{withPolicy, net(`{"egress":"allow","deny":["*.example.com"]}`), sandbox.ErrUnsupportedCapability},
		{withPolicy, net(`{"allow":["10.1.2.3/8"]}`), sandbox.ErrInvalidRequest},
		{withPolicy, net(`{"egress":"sometimes"}`), sandbox.ErrInvalidRequest},
		// IPv6: well-formed, an allow rule is a capability this provider lacks; a deny rule holds anyway.
		{withPolicy, net(`{"allow":["2001:db8::/32"]}`), sandbox.ErrUnsupportedCapability},
		{withPolicy, net(`{"egress":"allow","deny":["2001:db8::/32","10.0.0.0/8"]}`), nil},
		{withPolicy, net(`{"allow":["2001:DB8::/32"]}`), sandbox.ErrInvalidRequest},
		{without, net(`{"egress":"deny"}`), nil},
		{without, net(`{"allow":["10.0.0.0/8"]}`), sandbox.ErrUnsupportedCapability},
		{without, spec(sandbox.VolumesKey, `[{"name":"v","mountPath":"/data"},{"name":"w","mountPath":"/workspace/w"}]`), nil},
		{without, spec(sandbox.VolumesKey, `[{"name":"v","mountPath":"/workspace"}]`), sandbox.ErrInvalidRequest},
		{without, spec(sandbox.VolumesKey, `[{"name":"v","mountPath":"/sandboxd/x"}]`), sandbox.ErrInvalidRequest},
		{without, spec(sandbox.VolumesKey, `[{"name":"v","mountPath":"/proc"}]`), sandbox.ErrInvalidRequest},
	} {
		err := tc.p.ValidateSpec(tc.spec)
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s (network policy %v): %v, want %v", tc.spec.Extensions, tc.p.cfg.NetworkPolicy, err, tc.want)
		}
	}
}

// TestPolicyObject: the object selects its Pod alone by the labels the Pod carries, denies ingress,
// and keeps the explicit policy in its annotation; the API server's validation would take it.
func TestPolicyObject(t *testing.T) {
	p := testProvider(nil)
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 2}
	rules, err := netpolicy.Parse(json.RawMessage(`{"allow":["203.0.113.0/24"],"deny":["203.0.113.9"]}`), netpolicy.EgressDeny)
	if err != nil {
		t.Fatal(err)
	}
	np, err := p.policyObject(ref, podName(ref), rules)
	if err != nil {
		t.Fatal(err)
	}
	pod := p.podFor(ref, sandbox.Spec{}, nil)
	for k, v := range np.Spec.PodSelector.MatchLabels {
		if pod.Labels[k] != v {
			t.Errorf("selector %s=%s, Pod label %q", k, v, pod.Labels[k])
		}
	}
	if got, ok := refOfMeta(&np.ObjectMeta); !ok || got != ref || np.Name != pod.Name {
		t.Errorf("policy %s names %v %v", np.Name, got, ok)
	}
	if len(np.Spec.Ingress) != 0 || len(np.Spec.PolicyTypes) != 2 || len(np.Spec.Egress) != 1 || len(np.Spec.Egress[0].Ports) != 0 {
		t.Errorf("spec %+v", np.Spec)
	}
	if want := `{"egress":"deny","allow":["203.0.113.0/24"],"deny":["203.0.113.9/32"]}`; np.Annotations[annotationPolicy] != want {
		t.Errorf("annotation %s, want %s", np.Annotations[annotationPolicy], want)
	}
}

// TestPodVolumes: each volume is its claim in the Pod, mounted where asked, read-only where asked; claim
// names are DNS names, distinct for distinct volume names.
func TestPodVolumes(t *testing.T) {
	p := testProvider(nil)
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	vols := []sandbox.VolumeMount{{Name: "cache", MountPath: "/data"}, {Name: "ro_set", MountPath: "/srv/ro", ReadOnly: true}}
	pod := p.podFor(ref, sandbox.Spec{}, vols)
	c := pod.Spec.Containers[0]
	byName := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		byName[v.Name] = v
	}
	for i, m := range vols {
		var mount *corev1.VolumeMount
		for j := range c.VolumeMounts {
			if c.VolumeMounts[j].MountPath == m.MountPath {
				mount = &c.VolumeMounts[j]
			}
		}
		if mount == nil || mount.ReadOnly != m.ReadOnly {
			t.Fatalf("volume %d: mount %+v", i, mount)
		}
		claim := byName[mount.Name].PersistentVolumeClaim
		if claim == nil || claim.ClaimName != claimName(m.Name) || claim.ReadOnly != m.ReadOnly {
			t.Fatalf("volume %d: claim %+v", i, claim)
		}
	}
	seen := map[string]string{}
	for _, name := range []string{"a", "a_b", "a-b", "a.b", "a..b", "b.", strings.Repeat("x_", 31) + "y", "0"} {
		n := claimName(name)
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			t.Errorf("claim of %q: %q: %v", name, n, errs)
		}
		if prev, dup := seen[n]; dup {
			t.Errorf("%q and %q share the claim %q", prev, name, n)
		}
		seen[n] = name
		if v := volumeLabel(name); validLabelValue(v) != "" {
			t.Errorf("label of %q: %q", name, v)
		}
	}
}
