package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// Allocate creates ref's Pod, or adopts the existing one of that name, and reports it starting: readiness
// is observed later, once the agent answers. The Pod's NetworkPolicy is made before it. A volume that
// is not shared and has a writer already makes the generation failed (volume_in_use) without a Pod.
// Errors: ErrInvalidRequest (resources no Pod can have, a volume that does not exist),
// ErrUnsupportedCapability (a spec ValidateSpec refuses), ErrProviderUnavailable (the API server
// refused or failed).
func (p *Provider) Allocate(ctx context.Context, ref sandbox.Ref, spec sandbox.Spec) (sandbox.Observation, error) {
	if err := checkResources(spec.Resources); err != nil {
		return sandbox.Observation{}, err
	}
	if err := p.ValidateSpec(spec); err != nil {
		return sandbox.Observation{}, err
	}
	vols, err := sandbox.VolumeMounts(spec)
	if err != nil {
		return sandbox.Observation{}, err
	}
	if len(vols) > 0 {
		if err := p.volumes(); err != nil {
			return sandbox.Observation{}, err
		}
	}
	b := p.box(ref)
	p.mu.Lock()
	b.release = false
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	if p.cfg.NetworkPolicy {
		if err := p.ensurePolicy(ctx, ref, b.name, spec); err != nil {
			return sandbox.Observation{}, err
		}
	}
	if len(vols) > 0 {
		p.volMu.Lock()
		defer p.volMu.Unlock()
		err := p.claimVolumes(ctx, b.name, vols)
		if errors.Is(err, errVolumeInUse) {
			return sandbox.Observation{Ref: ref, State: sandbox.ObservedFailed, Reason: reasonVolumeInUse, Message: err.Error()}, nil
		}
		if err != nil {
			return sandbox.Observation{}, err
		}
	}
	pods := p.cs.CoreV1().Pods(p.cfg.Namespace)
	pod, err := pods.Create(ctx, p.podFor(ref, spec, vols), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		pod, err = pods.Get(ctx, b.name, metav1.GetOptions{})
		if err == nil {
			if got, ok := refOf(pod); !ok || got != ref {
				return sandbox.Observation{}, fmt.Errorf("kubernetes: Pod %s exists and is not %s's: %w", b.name, ref, sandbox.ErrProviderUnavailable)
			}
			p.log.Info("adopted an existing Pod", "pod", b.name, "uid", pod.UID)
		}
	}
	if err != nil {
		if apierrors.IsInvalid(err) {
			return sandbox.Observation{}, fmt.Errorf("kubernetes: Pod for %s: %v: %w", ref, err, sandbox.ErrInvalidRequest)
		}
		return sandbox.Observation{}, fmt.Errorf("kubernetes: create Pod for %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
	}
	if p.cfg.NetworkPolicy {
		if err := p.ownPolicy(ctx, pod); err != nil {
			return sandbox.Observation{}, err
		}
	}
	p.mu.Lock()
	b.seen, b.deleted = string(pod.UID), false
	p.mu.Unlock()
	return p.classify(ctx, b, pod), nil
}

// Observe reports on ref from the informer's cache, falling back to the API server when the cache has
// not seen the Pod yet. A running Pod is ready once its agent has answered a health check through
// pods/exec. A Pod that disappeared without a Release is failed ("pod_deleted").
func (p *Provider) Observe(ctx context.Context, ref sandbox.Ref) (sandbox.Observation, error) {
	b := p.box(ref)
	ctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	pod, err := p.getPod(ctx, b.name)
	if err != nil {
		return sandbox.Observation{}, err
	}
	if pod != nil {
		if got, ok := refOf(pod); !ok || got != ref {
			pod = nil // a Pod of that name that is not this generation's
		}
	}
	if pod == nil {
		p.mu.Lock()
		deleted := b.deleted
		p.mu.Unlock()
		if deleted {
			return p.observation(b, nil, sandbox.ObservedFailed, "pod_deleted", "the sandbox's Pod was deleted outside the runtime"), nil
		}
		return sandbox.Observation{Ref: ref, State: sandbox.ObservedAbsent}, nil
	}
	p.mu.Lock()
	b.seen = string(pod.UID)
	p.mu.Unlock()
	return p.classify(ctx, b, pod), nil
}

// getPod returns the named Pod from the cache, or from the API server when the cache lacks it, or nil
// when there is none.
func (p *Provider) getPod(ctx context.Context, name string) (*corev1.Pod, error) {
	pod, err := p.pods.Pods(p.cfg.Namespace).Get(name)
	if err == nil {
		return pod, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("kubernetes: Pod %s: %v: %w", name, err, sandbox.ErrProviderUnavailable)
	}
	pod, err = p.cs.CoreV1().Pods(p.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("kubernetes: get Pod %s: %v: %w", name, err, sandbox.ErrProviderUnavailable)
	}
	return pod, nil
}

// Failure reasons, stable and machine-readable.
const (
	reasonDeleted     = "pod_deleted"
	reasonEvicted     = "evicted"
	reasonNodeLost    = "node_lost"
	reasonPreempted   = "preempted"
	reasonOOM         = "oom_killed"
	reasonAgentExited = "agent_exited"
	reasonProtocol    = "agent_protocol" // the agent image speaks another protocol version (protocol.ErrMismatch)
	reasonPodFailed   = "pod_failed"
	reasonImage       = "image_unavailable"
	reasonContainer   = "container_error"
)

// waitingFailures are container waiting reasons that never resolve by themselves.
var waitingFailures = map[string]string{
	"ErrImageNeverPull":          reasonImage,
	"ErrImagePull":               reasonImage,
	"ImagePullBackOff":           reasonImage,
	"InvalidImageName":           reasonImage,
	"CreateContainerConfigError": reasonContainer,
	"CreateContainerError":       reasonContainer,
	"RunContainerError":          reasonContainer,
	"CrashLoopBackOff":           reasonContainer,
}

// classify turns a Pod into an observation: phase, conditions and container statuses, then the agent.
func (p *Provider) classify(ctx context.Context, b *box, pod *corev1.Pod) sandbox.Observation {
	failed := func(reason, msg string) sandbox.Observation {
		return p.observation(b, pod, sandbox.ObservedFailed, reason, msg)
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return failed(disruptionReason(c.Reason), fmt.Sprintf("%s: %s", c.Reason, c.Message))
		}
	}
	if pod.DeletionTimestamp != nil {
		p.mu.Lock()
		releasing := b.release
		p.mu.Unlock()
		if !releasing {
			return failed(reasonDeleted, "the sandbox's Pod is being deleted outside the runtime")
		}
		return p.observation(b, pod, sandbox.ObservedStarting, "", "the Pod is being deleted")
	}
	switch pod.Status.Phase {
	case corev1.PodFailed:
		switch pod.Status.Reason {
		case "Evicted":
			return failed(reasonEvicted, pod.Status.Message)
		case "NodeLost", "Terminated", "NodeShutdown":
			return failed(reasonNodeLost, pod.Status.Reason+": "+pod.Status.Message)
		case "Preempting":
			return failed(reasonPreempted, pod.Status.Message)
		}
		if t := terminated(pod.Status.ContainerStatuses); t != nil && t.Reason == "OOMKilled" {
			return failed(reasonOOM, "the sandbox ran out of memory and its agent was killed")
		}
		if t := terminated(pod.Status.InitContainerStatuses); t != nil && t.ExitCode != 0 {
			return failed(reasonContainer, fmt.Sprintf("installing the agent failed: exit %d %s %s", t.ExitCode, t.Reason, t.Message))
		}
		return failed(reasonPodFailed, strings.TrimSpace(pod.Status.Reason+" "+pod.Status.Message+" "+containerSummary(pod)))
	case corev1.PodSucceeded:
		return failed(reasonAgentExited, "the sandbox's agent exited")
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil {
			if reason, ok := waitingFailures[w.Reason]; ok {
				return failed(reason, fmt.Sprintf("container %s: %s: %s", cs.Name, w.Reason, w.Message))
			}
		}
	}
	var running *corev1.ContainerStatus
	for i := range pod.Status.ContainerStatuses {
		if cs := &pod.Status.ContainerStatuses[i]; cs.Name == containerName && cs.State.Running != nil {
			running = cs
		}
	}
	if pod.Status.Phase != corev1.PodRunning || running == nil {
		msg := "the Pod is " + strings.ToLower(string(pod.Status.Phase))
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				msg = "not scheduled: " + c.Reason + ": " + c.Message
			}
		}
		return p.observation(b, pod, sandbox.ObservedStarting, "", msg)
	}
	if lost, msg := p.nodeLost(ctx, pod); lost {
		return failed(reasonNodeLost, msg)
	}
	p.mu.Lock()
	answered := b.answered == string(pod.UID)
	p.mu.Unlock()
	if !answered {
		hctx, cancel := context.WithTimeout(ctx, min(p.cfg.CallTimeout, 5*time.Second))
		_, err := b.client.Health(hctx)
		cancel()
		if errors.Is(err, protocol.ErrMismatch) {
			return failed(reasonProtocol, err.Error())
		}
		if err != nil {
			return p.observation(b, pod, sandbox.ObservedStarting, "", "the agent does not answer yet: "+err.Error())
		}
		p.mu.Lock()
		b.answered = string(pod.UID)
		p.mu.Unlock()
	}
	return p.observation(b, pod, sandbox.ObservedReady, "", "")
}

// nodeLost reports whether a running Pod's node stopped reporting: the node controller then marks the
// Pod not ready (with no reason of its own), and the node's Ready condition is not True. The node is
// read only then, and a provider that may not read nodes never concludes the node is lost.
func (p *Provider) nodeLost(ctx context.Context, pod *corev1.Pod) (bool, string) {
	notReady := false
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionFalse {
			notReady = true
		}
	}
	if !notReady || pod.Spec.NodeName == "" {
		return false, ""
	}
	node, err := p.cs.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, fmt.Sprintf("node %s no longer exists", pod.Spec.NodeName)
	}
	if err != nil {
		return false, ""
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return true, fmt.Sprintf("node %s is %s: %s", node.Name, c.Reason, c.Message)
		}
	}
	return false, ""
}

func disruptionReason(r string) string {
	switch r {
	case "DeletionByTaintManager":
		return reasonNodeLost
	case "PreemptionByScheduler":
		return reasonPreempted
	}
	return reasonEvicted // EvictionByEvictionAPI, TerminationByKubelet, DeletionByPodGC, ...
}

func terminated(st []corev1.ContainerStatus) *corev1.ContainerStateTerminated {
	for _, cs := range st {
		if t := cs.State.Terminated; t != nil {
			return t
		}
	}
	return nil
}

func containerSummary(pod *corev1.Pod) string {
	var parts []string
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			parts = append(parts, fmt.Sprintf("container %s exited %d (%s)", cs.Name, t.ExitCode, t.Reason))
		}
	}
	return strings.Join(parts, ", ")
}

// podInfo is what an observation carries under providerExtensions["kubernetes"].
type podInfo struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	UID       string `json:"uid,omitempty"`
	Node      string `json:"node,omitempty"`
	PodIP     string `json:"podIP,omitempty"`
	Phase     string `json:"phase,omitempty"`
}

func (p *Provider) observation(b *box, pod *corev1.Pod, state sandbox.ObservedState, reason, msg string) sandbox.Observation {
	obs := sandbox.Observation{Ref: b.ref, State: state, Reason: reason, Message: msg}
	if pod == nil {
		return obs
	}
	info := podInfo{Namespace: p.cfg.Namespace, Pod: pod.Name, UID: string(pod.UID), Node: pod.Spec.NodeName, PodIP: pod.Status.PodIP}
	if state != sandbox.ObservedReady {
		info.Phase = string(pod.Status.Phase)
	}
	if raw, err := json.Marshal(info); err == nil {
		obs.Extensions = map[string]json.RawMessage{"kubernetes": raw}
	}
	return obs
}

// Release deletes ref's Pod with its grace period, waits for it to be gone, forces the deletion past
// that, and deletes the NetworkPolicy made for it. Releasing an absent generation succeeds.
func (p *Provider) Release(ctx context.Context, ref sandbox.Ref) error {
	b := p.box(ref)
	p.mu.Lock()
	b.release = true
	p.mu.Unlock()
	b.client.Close()
	grace := int64(max(1, p.cfg.StopGrace.Seconds()))
	gone, err := p.deletePod(ctx, b.name, grace, p.cfg.StopGrace+10*time.Second)
	if err == nil && !gone {
		p.log.Warn("Pod outlived its grace period, forcing its deletion", "pod", b.name)
		gone, err = p.deletePod(ctx, b.name, 0, 30*time.Second)
	}
	if err != nil {
		return err
	}
	if !gone {
		return fmt.Errorf("kubernetes: Pod %s still exists after a forced delete: %w", b.name, sandbox.ErrProviderUnavailable)
	}
	if p.cfg.NetworkPolicy {
		if err := p.deletePolicy(ctx, b.name); err != nil {
			return err
		}
	}
	p.mu.Lock()
	if p.boxes[ref] == b && b.release {
		delete(p.boxes, ref)
	}
	p.mu.Unlock()
	return nil
}

// deletePod deletes the named Pod with the grace period and waits up to wait for it to be gone.
func (p *Provider) deletePod(ctx context.Context, name string, grace int64, wait time.Duration) (bool, error) {
	pods := p.cs.CoreV1().Pods(p.cfg.Namespace)
	dctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	err := pods.Delete(dctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	cancel()
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("kubernetes: delete Pod %s: %v: %w", name, err, sandbox.ErrProviderUnavailable)
	}
	deadline := time.Now().Add(wait)
	for delay := 20 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		gctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
		_, err := pods.Get(gctx, name, metav1.GetOptions{})
		cancel()
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil && ctx.Err() != nil:
			return false, fmt.Errorf("kubernetes: waiting for Pod %s to go: %v: %w", name, err, sandbox.ErrProviderUnavailable)
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("kubernetes: waiting for Pod %s to go: %w", name, errors.Join(ctx.Err(), sandbox.ErrProviderUnavailable))
		case <-time.After(delay):
		}
	}
}
