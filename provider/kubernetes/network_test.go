package kubernetes_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/httpapi"
	"github.com/sandboxd/sandbox/httpapi/apitest"
	"github.com/sandboxd/sandbox/internal/testenv/stack"
	"github.com/sandboxd/sandbox/provider/kubernetes"
)

// apiStack is the daemon's stack (store in dir, runtime, HTTP API) over a provider of cfg, and a client
// whose every answer is checked against the contract and api/extensions.yaml. stop ends it as a crash
// would: nothing is released.
func apiStack(t *testing.T, dir string, cfg kubernetes.Config) (c *client.Client, stop func()) {
	t.Helper()
	p := newProviderIn(t, cfg)
	s, err := stack.Start(dir, p, stack.Core(func(c *core.Config) { c.ReadyTimeout = 2 * time.Minute }),
		stack.API(func(c *httpapi.Config) { c.HeartbeatInterval = 300 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			s.Close()
			p.Close()
		}
	}
	t.Cleanup(stop)
	c, err = client.New(s.URL, client.WithHTTPClient(&http.Client{Transport: apitest.Transport(t, http.DefaultTransport)}),
		client.WithRetry(20, 20*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return c, stop
}

// create makes a sandbox of spec and waits until it is ready.
func create(t *testing.T, c *client.Client, spec sandbox.Spec) *sandbox.Sandbox {
	t.Helper()
	ctx := context.Background()
	sb, err := c.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	ready, err := c.WaitState(ctx, sb.ID, sandbox.StateReady)
	if err != nil {
		t.Fatalf("wait for %s to be ready: %v", sb.ID, err)
	}
	return ready
}

func withExtension(key, value string) sandbox.Spec {
	return sandbox.Spec{ClientRequestID: client.NewRequestID(), Extensions: map[string]json.RawMessage{key: json.RawMessage(value)}}
}

// peers writes a NetworkPolicy's egress as "cidr except a,b" strings.
func peers(np *networkingv1.NetworkPolicy) []string {
	out := []string{}
	for _, r := range np.Spec.Egress {
		for _, pe := range r.To {
			s := pe.IPBlock.CIDR
			for i, e := range pe.IPBlock.Except {
				if i == 0 {
					s += " except "
				} else {
					s += ","
				}
				s += e
			}
			out = append(out, s)
		}
	}
	return out
}

// TestNetworkPolicyObjects: a sandbox's egress policy is its Pod's NetworkPolicy, exactly: the Pod
// alone selected, no ingress, the CIDR rules as ipBlocks with deny rules as except, owned by the
// Pod. GET and PUT /network read and replace it, fenced by the generation. A policy with a rule by
// name is 422 before anything is made, at create and at PUT. A Pod deleted behind the runtime's back
// takes its policy with it. (Whether the cluster enforces the objects is its network plugin's
// business; the test cluster's bridge plugin does not.)
func TestNetworkPolicyObjects(t *testing.T) {
	ns := namespace(t)
	cfg := config(t, ns)
	cfg.NetworkPolicy = true
	c, _ := apiStack(t, t.TempDir(), cfg)
	ctx := context.Background()
	nps := clientset.NetworkingV1().NetworkPolicies(ns)

	for _, policy := range []string{`{"allow":["pypi.org"]}`, `{"egress":"allow","deny":["*.example.com"]}`} {
		if _, err := c.Create(ctx, withExtension("sandboxd.network", policy)); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
			t.Fatalf("create with %s: %v, want unsupported_capability", policy, err)
		}
	}
	if list, err := c.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("sandboxes after refused creates: %d, %v", len(list), err)
	}
	if list, err := nps.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Fatalf("NetworkPolicies after refused creates: %+v, %v", list, err)
	}

	sb := create(t, c, withExtension("sandboxd.network", `{"allow":["203.0.113.0/24","198.51.100.7"],"deny":["203.0.113.9"]}`))
	pod := podOf(t, ns, sb.Ref())
	np, err := nps.Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	if selected, err := clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()}); err != nil || len(selected.Items) != 1 || selected.Items[0].UID != pod.UID {
		t.Fatalf("the policy's selector %s selects %d Pods, want its Pod alone: %v", sel, len(selected.Items), err)
	}
	if len(np.Spec.Ingress) != 0 || !reflect.DeepEqual(np.Spec.PolicyTypes, []networkingv1.PolicyType{"Ingress", "Egress"}) || len(np.Spec.Egress) != 1 || len(np.Spec.Egress[0].Ports) != 0 {
		t.Fatalf("policy spec %+v", np.Spec)
	}
	if got, want := peers(np), []string{"203.0.113.0/24 except 203.0.113.9/32", "198.51.100.7/32"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("egress %q, want %q", got, want)
	}
	if o := np.OwnerReferences; len(o) != 1 || o[0].Kind != "Pod" || o[0].UID != pod.UID {
		t.Fatalf("owners %+v, want the Pod %s", o, pod.UID)
	}

	n, err := c.Network(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := (client.NetworkPolicy{Egress: "deny", Allow: []string{"203.0.113.0/24", "198.51.100.7/32"}, Deny: []string{"203.0.113.9/32"}}); !reflect.DeepEqual(n.Policy, want) || n.Generation != sb.Generation {
		t.Fatalf("network %+v, want policy %+v", n, want)
	}

	if _, err := c.SetNetwork(ctx, sb.ID, sb.Generation+1, client.NetworkPolicy{Egress: "allow"}); !errors.Is(err, sandbox.ErrGenerationConflict) {
		t.Fatalf("set at another generation: %v", err)
	}
	if _, err := c.SetNetwork(ctx, sb.ID, sb.Generation, client.NetworkPolicy{Allow: []string{"example.com"}}); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
		t.Fatalf("set with a name: %v", err)
	}
	n, err = c.SetNetwork(ctx, sb.ID, sb.Generation, client.NetworkPolicy{Egress: "allow", Deny: []string{"10.0.0.0/8"}})
	if err != nil || n.Policy.Egress != "allow" || !reflect.DeepEqual(n.Policy.Deny, []string{"10.0.0.0/8"}) {
		t.Fatalf("set: %+v, %v", n, err)
	}
	np, err = nps.Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := peers(np), []string{"0.0.0.0/0 except 0.0.0.0/8,10.0.0.0/8,127.0.0.0/8,169.254.0.0/16,224.0.0.0/3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("egress after the change %q, want %q", got, want)
	}
	if again, err := c.Network(ctx, sb.ID); err != nil || !reflect.DeepEqual(again.Policy, n.Policy) {
		t.Fatalf("network after the change: %+v, %v", again, err)
	}

	// Deleted behind the runtime's back, the Pod takes its policy with it (the garbage collector's work).
	zero := int64(0)
	if err := clientset.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the policy to go with its Pod", func() (bool, string) {
		_, err := nps.Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), "present"
	})

	// Terminating removes the policy too.
	other := create(t, c, sandbox.Spec{ClientRequestID: client.NewRequestID()})
	name := podOf(t, ns, other.Ref()).Name
	if np, err := nps.Get(ctx, name, metav1.GetOptions{}); err != nil || len(peers(np)) != 0 {
		t.Fatalf("the default policy denies every egress: %v, %v", peers(np), err)
	}
	if _, err := c.Terminate(ctx, other.ID, other.Generation); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitState(ctx, other.ID, sandbox.StateTerminated); err != nil {
		t.Fatal(err)
	}
	if _, err := nps.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("policy after terminate: %v", err)
	}
}

// TestNetworkPolicyOrphan: a NetworkPolicy left without its Pod (a daemon that stopped between making
// the two) is an orphan the next daemon removes at its start.
func TestNetworkPolicyOrphan(t *testing.T) {
	ns := namespace(t)
	cfg := config(t, ns)
	cfg.NetworkPolicy = true
	ctx := context.Background()
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	name := "sbx-" + string(ref.ID)[4:] + "-g1"
	orphan := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"app.kubernetes.io/managed-by": "sandboxd", "sandboxd.io/instance": "default",
			"sandboxd.io/id": string(ref.ID), "sandboxd.io/generation": "1",
		}, Annotations: map[string]string{"sandboxd.io/id": string(ref.ID)}},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{"Ingress", "Egress"}},
	}
	nps := clientset.NetworkingV1().NetworkPolicies(ns)
	if _, err := nps.Create(ctx, orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	refs, err := newProviderIn(t, cfg).Resources(ctx)
	if err != nil || len(refs) != 1 || refs[0] != ref {
		t.Fatalf("resources %v, %v; want the orphan policy's %s", refs, err, ref)
	}
	apiStack(t, t.TempDir(), cfg)
	waitFor(t, "the orphan policy to be removed", func() (bool, string) {
		_, err := nps.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), "present"
	})
}
