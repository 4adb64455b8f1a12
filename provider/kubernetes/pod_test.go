package kubernetes

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/version"
)

func TestPodName(t *testing.T) {
	names := map[string]sandbox.Ref{}
	for _, ref := range []sandbox.Ref{
		{ID: sandbox.NewID(), Generation: 1},
		{ID: "sbx_abc", Generation: 12},
		{ID: "Other_ID", Generation: 1},
		{ID: "other-id", Generation: 1},
		{ID: "other.id", Generation: 1},
		{ID: sandbox.ID(strings.Repeat("x_Y", 100)), Generation: 9223372036854775807},
		{ID: "___", Generation: 1},
	} {
		n := podName(ref)
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			t.Errorf("name %q of %s: %v", n, ref, errs)
		}
		if prev, dup := names[n]; dup {
			t.Errorf("%s and %s share the name %q", prev, ref, n)
		}
		names[n] = ref
		if v := idLabel(ref.ID); validLabelValue(v) != "" {
			t.Errorf("label %q of %s is not a label value", v, ref)
		}
	}
	if got := podName(sandbox.Ref{ID: "sbx_abc", Generation: 12}); got != "sbx-abc-g12" {
		t.Errorf("podName = %q", got)
	}
}

func testProvider(tmpl *corev1.Pod) *Provider {
	return &Provider{
		cfg: Config{Namespace: "ns", DefaultImage: "img:1", AgentImage: "agent:1", Instance: "default", Template: tmpl,
			StopGrace: 2e9, CallTimeout: 5e9},
		log:   slog.New(slog.DiscardHandler),
		boxes: map[sandbox.Ref]*box{},
	}
}

// TestManifestVersion: the manifest names the build's version, and the template's runtime class.
func TestManifestVersion(t *testing.T) {
	rc := "kata"
	m, err := testProvider(&corev1.Pod{Spec: corev1.PodSpec{RuntimeClassName: &rc}}).Manifest(context.Background())
	if err != nil || m.Name != "kubernetes" || m.Version != version.Version || m.RuntimeClass != "kata" {
		t.Fatalf("manifest %+v, %v; want version %q", m, err, version.Version)
	}
}

func TestPodFor(t *testing.T) {
	rc := "kata"
	tmpl := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ignored", Labels: map[string]string{"team": "a", labelInstance: "spoofed"}},
		Spec: corev1.PodSpec{
			RuntimeClassName: &rc,
			NodeSelector:     map[string]string{"disk": "ssd"},
			Tolerations:      []corev1.Toleration{{Key: "sandbox", Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{
				{Name: "sidecar", Image: "side:1"},
				{Name: "sandbox", ImagePullPolicy: corev1.PullNever, Env: []corev1.EnvVar{{Name: "A", Value: "1"}}},
			},
		},
	}
	p := testProvider(tmpl)
	ref := sandbox.Ref{ID: "sbx_abc", Generation: 2}
	pod := p.podFor(ref, sandbox.Spec{Resources: &sandbox.Resources{CPUMillis: 500}}, nil)
	if pod.Name != "sbx-abc-g2" || pod.Namespace != "ns" || pod.Labels["team"] != "a" || pod.Labels[labelInstance] != "default" {
		t.Fatalf("meta %+v", pod.ObjectMeta)
	}
	if got, ok := refOf(pod); !ok || got != ref {
		t.Fatalf("refOf = %v, %v", got, ok)
	}
	s := pod.Spec
	if *s.RuntimeClassName != "kata" || s.NodeSelector["disk"] != "ssd" || len(s.Tolerations) != 1 || s.RestartPolicy != corev1.RestartPolicyNever {
		t.Fatalf("spec lost the template's defaults: %+v", s)
	}
	c := s.Containers[0]
	if len(s.Containers) != 1 || c.Name != "sandbox" || c.Image != "img:1" || c.ImagePullPolicy != corev1.PullNever || len(c.Env) != 1 {
		t.Fatalf("container %+v", s.Containers)
	}
	if q := c.Resources.Limits[corev1.ResourceCPU]; q.MilliValue() != 500 {
		t.Fatalf("cpu limit %v", q)
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		t.Fatal("a memory limit nobody asked for")
	}
	if len(s.InitContainers) != 1 || s.InitContainers[0].Image != "agent:1" || s.InitContainers[0].ImagePullPolicy != corev1.PullNever {
		t.Fatalf("init containers %+v", s.InitContainers)
	}
	if tmpl.Spec.Containers[1].VolumeMounts != nil || tmpl.Labels[labelInstance] != "spoofed" {
		t.Fatal("podFor changed the template")
	}
	if err := checkResources(&sandbox.Resources{MemoryMiB: -1}); err == nil {
		t.Fatal("negative memory accepted")
	}
}

// TestClassify checks how Pod states become observations, for the states that need no call to the
// cluster (a running Pod needs its agent, which the cluster tests cover).
func TestClassify(t *testing.T) {
	p := testProvider(nil)
	ref := sandbox.Ref{ID: "sbx_abc", Generation: 1}
	b := &box{ref: ref, name: podName(ref)}
	now := metav1.Now()
	terminated := func(reason string, code int32) []corev1.ContainerStatus {
		return []corev1.ContainerStatus{{Name: containerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: reason, ExitCode: code}}}}
	}
	waiting := func(reason string) []corev1.ContainerStatus {
		return []corev1.ContainerStatus{{Name: containerName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}}
	}
	cases := []struct {
		name   string
		pod    corev1.Pod
		state  sandbox.ObservedState
		reason string
	}{
		{"pending", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, sandbox.ObservedStarting, ""},
		{"unschedulable", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable"}}}}, sandbox.ObservedStarting, ""},
		{"evicted", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}}, sandbox.ObservedFailed, reasonEvicted},
		{"node lost", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "NodeLost"}}, sandbox.ObservedFailed, reasonNodeLost},
		{"taint eviction", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByTaintManager"}}}}, sandbox.ObservedFailed, reasonNodeLost},
		{"api eviction", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI"}}}}, sandbox.ObservedFailed, reasonEvicted},
		{"oom", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: terminated("OOMKilled", 137)}}, sandbox.ObservedFailed, reasonOOM},
		{"crashed", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: terminated("Error", 2)}}, sandbox.ObservedFailed, reasonPodFailed},
		{"install failed", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, InitContainerStatuses: terminated("Error", 1)}}, sandbox.ObservedFailed, reasonContainer},
		{"exited", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, sandbox.ObservedFailed, reasonAgentExited},
		{"no image", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: waiting("ErrImageNeverPull")}}, sandbox.ObservedFailed, reasonImage},
		{"creating", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: waiting("ContainerCreating")}}, sandbox.ObservedStarting, ""},
		{"deleted outside", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}, sandbox.ObservedFailed, reasonDeleted},
	}
	for _, c := range cases {
		c.pod.Name, c.pod.UID = b.name, "uid-1"
		obs := p.classify(context.Background(), b, &c.pod)
		if err := obs.Validate(ref); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if obs.State != c.state || obs.Reason != c.reason {
			t.Errorf("%s: %s %q (%s), want %s %q", c.name, obs.State, obs.Reason, obs.Message, c.state, c.reason)
		}
		var info podInfo
		if err := json.Unmarshal(obs.Extensions["kubernetes"], &info); err != nil || info.Namespace != "ns" || info.Pod != b.name || info.UID != "uid-1" {
			t.Errorf("%s: Pod %s, %v", c.name, obs.Extensions["kubernetes"], err)
		}
	}
	b.release = true
	being := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: b.name, DeletionTimestamp: &now}}
	if obs := p.classify(context.Background(), b, &being); obs.State == sandbox.ObservedFailed {
		t.Errorf("a Pod being released is failed: %+v", obs)
	}
}
