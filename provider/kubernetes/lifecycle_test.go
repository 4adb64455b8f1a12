package kubernetes_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/provider/kubernetes"
)

func observe(t testing.TB, p sandbox.Provider, ref sandbox.Ref) sandbox.Observation {
	t.Helper()
	obs, err := p.Observe(context.Background(), ref)
	if err != nil {
		t.Fatalf("observe %s: %v", ref, err)
	}
	if err := obs.Validate(ref); err != nil {
		t.Fatalf("observe %s: %v", ref, err)
	}
	return obs
}

func waitObserved(t testing.TB, p sandbox.Provider, ref sandbox.Ref, want sandbox.ObservedState) sandbox.Observation {
	t.Helper()
	var obs sandbox.Observation
	waitFor(t, "observe "+ref.Name()+" as "+string(want), func() (bool, string) {
		obs = observe(t, p, ref)
		return obs.State == want, string(obs.State) + " " + obs.Reason + " " + obs.Message
	})
	return obs
}

func podOf(t testing.TB, ns string, ref sandbox.Ref) *corev1.Pod {
	t.Helper()
	list, err := clientset.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: "sandboxd.io/id=" + string(ref.ID) + ",sandboxd.io/generation=" + itoa(int64(ref.Generation)),
	})
	if err != nil {
		t.Fatalf("list Pods: %v", err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d Pods for %s, want exactly 1", len(list.Items), ref)
	}
	return &list.Items[0]
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// podUID is the UID of the Pod an observation reports under providerExtensions.
func podUID(t testing.TB, obs sandbox.Observation) string {
	t.Helper()
	var info struct {
		UID string `json:"uid"`
	}
	if err := json.Unmarshal(obs.Extensions["kubernetes"], &info); err != nil || info.UID == "" {
		t.Fatalf("observation of %s names no Pod: %s, %v", obs.Ref, obs.Extensions["kubernetes"], err)
	}
	return info.UID
}

// TestPodShape checks the Pod an allocation makes: name and labels from the generation, the spec's image
// and resources, the agent installed by an init container, no cluster credentials; and that allocation
// and readiness are separate states.
func TestPodShape(t *testing.T) {
	ns := namespace(t)
	p := newProviderIn(t, config(t, ns))
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 3}
	spec := sandbox.Spec{ClientRequestID: "shape", Image: sandboxImage(), Resources: &sandbox.Resources{CPUMillis: 250, MemoryMiB: 96, DiskMiB: 64}}
	obs, err := p.Allocate(context.Background(), ref, spec)
	if err != nil {
		t.Fatalf("allocate: %v", err)
	}
	if obs.State != sandbox.ObservedStarting {
		t.Fatalf("allocate reported %s, want starting (readiness comes from the agent, later)", obs.State)
	}
	t.Cleanup(func() { p.Release(context.Background(), ref) })
	pod := podOf(t, ns, ref)
	if want := "sbx-" + string(ref.ID)[4:] + "-g3"; pod.Name != want {
		t.Fatalf("Pod name %q, want %q", pod.Name, want)
	}
	if pod.Labels["app.kubernetes.io/managed-by"] != "sandboxd" || pod.Annotations["sandboxd.io/id"] != string(ref.ID) {
		t.Fatalf("Pod labels %v annotations %v", pod.Labels, pod.Annotations)
	}
	c := pod.Spec.Containers[0]
	if len(pod.Spec.Containers) != 1 || c.Image != sandboxImage() || c.ImagePullPolicy != corev1.PullNever {
		t.Fatalf("containers %+v", pod.Spec.Containers)
	}
	for name, want := range map[corev1.ResourceName]string{"cpu": "250m", "memory": "96Mi", "ephemeral-storage": "64Mi"} {
		q := resource.MustParse(want)
		if got := c.Resources.Limits[name]; got.Cmp(q) != 0 {
			t.Errorf("limit %s = %s, want %s", name, got.String(), want)
		}
		if got := c.Resources.Requests[name]; got.Cmp(q) != 0 {
			t.Errorf("request %s = %s, want %s", name, got.String(), want)
		}
	}
	if len(pod.Spec.InitContainers) != 1 || pod.Spec.InitContainers[0].Image != agentImage {
		t.Fatalf("init containers %+v", pod.Spec.InitContainers)
	}
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Fatalf("Pod spec: automount %v, restart %s", pod.Spec.AutomountServiceAccountToken, pod.Spec.RestartPolicy)
	}
	ready := waitObserved(t, p, ref, sandbox.ObservedReady)
	if podUID(t, ready) != podUID(t, obs) {
		t.Fatalf("Pod %s when ready, %s when allocated", podUID(t, ready), podUID(t, obs))
	}
	// The limits hold inside: the memory cgroup of the sandbox says 96 MiB.
	res, err := p.Exec(context.Background(), ref, sandbox.Command{Argv: []string{"sh", "-c", "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max"}})
	if err != nil || res.ExitCode == nil || *res.ExitCode != 0 || res.Stdout != "100663296\n" {
		t.Fatalf("memory limit inside: %+v, %v", res, err)
	}
}

// TestAdopt checks that a second provider allocating the same generation adopts the existing Pod.
func TestAdopt(t *testing.T) {
	ns := namespace(t)
	a := newProviderIn(t, config(t, ns))
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	if _, err := a.Allocate(context.Background(), ref, sandbox.Spec{ClientRequestID: "adopt"}); err != nil {
		t.Fatal(err)
	}
	first := waitObserved(t, a, ref, sandbox.ObservedReady)
	if err := a.WriteFile(context.Background(), ref, "kept.txt", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b := newProviderIn(t, config(t, ns))
	t.Cleanup(func() { b.Release(context.Background(), ref) })
	again, err := b.Allocate(context.Background(), ref, sandbox.Spec{ClientRequestID: "adopt"})
	if err != nil {
		t.Fatalf("allocate in a new provider: %v", err)
	}
	if podUID(t, again) != podUID(t, first) {
		t.Fatalf("adopted Pod %s, first %s", podUID(t, again), podUID(t, first))
	}
	podOf(t, ns, ref) // exactly one
	waitObserved(t, b, ref, sandbox.ObservedReady)
	if got, err := b.ReadFile(context.Background(), ref, "kept.txt"); err != nil || string(got) != "kept" {
		t.Fatalf("file after adoption: %q, %v", got, err)
	}
}

// TestFailures checks the failures a Pod can have: an image that cannot be had, an agent that exits, a
// Pod deleted behind the provider's back.
func TestFailures(t *testing.T) {
	ns := namespace(t)
	p := newProviderIn(t, config(t, ns))
	ctx := context.Background()

	missing := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	if _, err := p.Allocate(ctx, missing, sandbox.Spec{ClientRequestID: "missing", Image: "local.test/no-such-image:1"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Release(ctx, missing) })
	if obs := waitObserved(t, p, missing, sandbox.ObservedFailed); obs.Reason != "image_unavailable" {
		t.Fatalf("missing image: %+v", obs)
	}

	exited := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	if _, err := p.Allocate(ctx, exited, sandbox.Spec{ClientRequestID: "exited"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Release(ctx, exited) })
	waitObserved(t, p, exited, sandbox.ObservedReady)
	// The agent is process 1 of its container and ends on SIGTERM; the result may or may not come back.
	_, _ = p.Exec(ctx, exited, sandbox.Command{Argv: []string{"kill", "-TERM", "1"}})
	if obs := waitObserved(t, p, exited, sandbox.ObservedFailed); obs.Reason != "agent_exited" {
		t.Fatalf("agent exited: %+v", obs)
	}
	if _, err := p.Exec(ctx, exited, sandbox.Command{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrProviderUnavailable) {
		t.Fatalf("exec in a sandbox whose agent exited: %v, want ErrProviderUnavailable", err)
	}

	deleted := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	if _, err := p.Allocate(ctx, deleted, sandbox.Spec{ClientRequestID: "deleted"}); err != nil {
		t.Fatal(err)
	}
	waitObserved(t, p, deleted, sandbox.ObservedReady)
	zero := int64(0)
	if err := clientset.CoreV1().Pods(ns).Delete(ctx, podOf(t, ns, deleted).Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if obs := waitObserved(t, p, deleted, sandbox.ObservedFailed); obs.Reason != "pod_deleted" {
		t.Fatalf("deleted Pod: %+v", obs)
	}
	if _, err := p.ReadFile(ctx, deleted, "x"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("read in a deleted Pod: %v, want ErrNotFound", err)
	}
	if err := p.Release(ctx, deleted); err != nil {
		t.Fatalf("release of a deleted Pod: %v", err)
	}
	if obs := observe(t, p, deleted); obs.State != sandbox.ObservedAbsent {
		t.Fatalf("after release: %+v", obs)
	}
}

// TestNetworkPolicy checks that a provider told the cluster enforces NetworkPolicy isolates each
// sandbox with one, and removes it with the Pod.
func TestNetworkPolicy(t *testing.T) {
	ns := namespace(t)
	cfg := config(t, ns)
	cfg.NetworkPolicy = true
	p := newProviderIn(t, cfg)
	ctx := context.Background()
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	if _, err := p.Allocate(ctx, ref, sandbox.Spec{ClientRequestID: "np"}); err != nil {
		t.Fatal(err)
	}
	name := podOf(t, ns, ref).Name
	np, err := clientset.NetworkingV1().NetworkPolicies(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || len(np.Spec.Ingress) != 0 || len(np.Spec.Egress) != 0 || len(np.Spec.PolicyTypes) != 2 {
		t.Fatalf("network policy: %+v, %v", np, err)
	}
	if err := p.Release(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if _, err := clientset.NetworkingV1().NetworkPolicies(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("network policy after release: %v", err)
	}
}

// TestTemplateFile checks that a template file is read, and that anything but a Pod is refused.
func TestTemplateFile(t *testing.T) {
	dir := t.TempDir()
	good := dir + "/pod.yaml"
	writeFile(t, good, "apiVersion: v1\nkind: Pod\nspec:\n  runtimeClassName: kata\n  nodeSelector: {disk: ssd}\n  containers:\n  - name: sandbox\n    imagePullPolicy: Never\n")
	pod, err := kubernetes.LoadTemplate(good)
	if err != nil || *pod.Spec.RuntimeClassName != "kata" || pod.Spec.NodeSelector["disk"] != "ssd" {
		t.Fatalf("template: %+v, %v", pod, err)
	}
	bad := dir + "/svc.yaml"
	writeFile(t, bad, "apiVersion: v1\nkind: Service\nmetadata: {name: x}\n")
	if _, err := kubernetes.LoadTemplate(bad); err == nil {
		t.Fatal("a Service was taken for a Pod template")
	}
	if _, err := kubernetes.LoadTemplate(dir + "/missing.yaml"); err == nil {
		t.Fatal("a missing template file was accepted")
	}
}

// TestTemplateRefusesUnknownFields: a field a v1 Pod does not have, in YAML or JSON, is an error that
// names it, not a default silently dropped.
func TestTemplateRefusesUnknownFields(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct{ template, field string }{
		"pod.yaml": {"apiVersion: v1\nkind: Pod\nspec:\n  nodeSelektor: {disk: ssd}\n", "spec.nodeSelektor"},
		"pod.json": {`{"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "sandbox", "imagePullPolicyy": "Never"}]}}`,
			"spec.containers[0].imagePullPolicyy"},
	} {
		path := dir + "/" + name
		writeFile(t, path, tc.template)
		_, err := kubernetes.LoadTemplate(path)
		if err == nil || !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error %v; want one naming %s and the file", name, err, tc.field)
		}
	}
}
