package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/sandboxd/sandbox"
)

// Labels and annotations on every Pod the provider makes. The labels select; the annotations keep the
// exact id, which a label value cannot always hold.
const (
	labelManagedBy  = "app.kubernetes.io/managed-by"
	managedBy       = "sandboxd"
	labelInstance   = "sandboxd.io/instance"
	labelID         = "sandboxd.io/id"
	labelGeneration = "sandboxd.io/generation"
	annotationID    = "sandboxd.io/id"
)

// Names inside the Pod.
const (
	containerName = "sandbox"
	initName      = "sandboxd-install"
	agentVolume   = "sandboxd"
	agentDir      = "/sandboxd"
	agentBinary   = agentDir + "/sandboxd"
	agentSocket   = agentDir + "/agent.sock"
	installDir    = "/shared"
	workVolume    = "workspace"
	workDir       = "/workspace"
)

var simpleID = regexp.MustCompile(`^sbx_[a-z0-9]{1,38}$`)

// podName is the DNS-safe name of ref's Pod: "sbx-<rest of the id>-g<generation>" for the runtime's own
// ids, and for any other id a cleaned prefix and a hash of the whole id, so that distinct ids never
// share a name.
func podName(ref sandbox.Ref) string {
	id := string(ref.ID)
	gen := "-g" + strconv.FormatInt(int64(ref.Generation), 10)
	if simpleID.MatchString(id) {
		return "sbx-" + id[len("sbx_"):] + gen
	}
	var b strings.Builder
	for _, r := range strings.ToLower(id) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else if b.Len() > 0 && !strings.HasSuffix(b.String(), "-") {
			b.WriteByte('-')
		}
		if b.Len() >= 20 {
			break
		}
	}
	sum := sha256.Sum256([]byte(id))
	return "sbx-" + strings.Trim(b.String(), "-") + "-" + hex.EncodeToString(sum[:5]) + gen
}

// idLabel is the id as a label value: itself when it is a valid one, else a hash of it.
func idLabel(id sandbox.ID) string {
	if validLabelValue(string(id)) == "" {
		return string(id)
	}
	sum := sha256.Sum256([]byte(id))
	return "h-" + hex.EncodeToString(sum[:16])
}

func validLabelValue(v string) string {
	return strings.Join(validation.IsValidLabelValue(v), "; ")
}

// refOf reads the generation a Pod belongs to from its annotation and label.
func refOf(pod *corev1.Pod) (sandbox.Ref, bool) { return refOfMeta(&pod.ObjectMeta) }

// refOfMeta reads the generation an object made for a Pod (the Pod, its NetworkPolicy) belongs to.
func refOfMeta(meta *metav1.ObjectMeta) (sandbox.Ref, bool) {
	id := meta.Annotations[annotationID]
	gen, err := strconv.ParseInt(meta.Labels[labelGeneration], 10, 64)
	if id == "" || err != nil || gen < 1 {
		return sandbox.Ref{}, false
	}
	ref := sandbox.Ref{ID: sandbox.ID(id), Generation: sandbox.Generation(gen)}
	if meta.Name != podName(ref) || meta.Labels[labelID] != idLabel(ref.ID) {
		return sandbox.Ref{}, false
	}
	return ref, true
}

// templateDecoder decodes a Pod template strictly: a field a v1 Pod does not have, or one given twice,
// is an error instead of being dropped, so a misspelt default is not silently ignored.
var templateDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// LoadTemplate reads a Pod template file, YAML or JSON of a v1 Pod. A field a v1 Pod does not have is
// an error.
func LoadTemplate(path string) (*corev1.Pod, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: pod template: %w", err)
	}
	obj, gvk, err := templateDecoder.Decode(data, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: pod template %s: %w", path, err)
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("kubernetes: pod template %s is a %s, not a v1 Pod", path, gvk.Kind)
	}
	return pod, nil
}

// checkResources refuses resources no Pod can be given.
func checkResources(r *sandbox.Resources) error {
	if r == nil {
		return nil
	}
	if r.CPUMillis < 0 || r.MemoryMiB < 0 || r.DiskMiB < 0 {
		return fmt.Errorf("resources %+v: negative: %w", *r, sandbox.ErrInvalidRequest)
	}
	return nil
}

// podFor builds ref's Pod from the template, the spec and the provider's own parts, with the volumes vols
// (the spec's, checked).
func (p *Provider) podFor(ref sandbox.Ref, spec sandbox.Spec, vols []sandbox.VolumeMount) *corev1.Pod {
	pod := &corev1.Pod{}
	if p.cfg.Template != nil {
		pod = p.cfg.Template.DeepCopy()
	}
	meta := metav1.ObjectMeta{
		Name:        podName(ref),
		Namespace:   p.cfg.Namespace,
		Labels:      maps.Clone(pod.Labels),
		Annotations: maps.Clone(pod.Annotations),
	}
	if meta.Labels == nil {
		meta.Labels = map[string]string{}
	}
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	maps.Copy(meta.Labels, map[string]string{
		labelManagedBy:  managedBy,
		labelInstance:   p.cfg.Instance,
		labelID:         idLabel(ref.ID),
		labelGeneration: strconv.FormatInt(int64(ref.Generation), 10),
	})
	meta.Annotations[annotationID] = string(ref.ID)
	pod.TypeMeta = metav1.TypeMeta{}
	pod.ObjectMeta = meta
	pod.Status = corev1.PodStatus{}

	s := &pod.Spec
	s.RestartPolicy = corev1.RestartPolicyNever // a dead agent is a failed sandbox, not a fresh one
	if s.AutomountServiceAccountToken == nil {
		s.AutomountServiceAccountToken = ptr(false) // no cluster credentials inside a sandbox
	}
	if s.EnableServiceLinks == nil {
		s.EnableServiceLinks = ptr(false)
	}
	if s.TerminationGracePeriodSeconds == nil {
		s.TerminationGracePeriodSeconds = ptr(int64(max(1, p.cfg.StopGrace.Seconds())))
	}

	var c corev1.Container
	for _, tc := range s.Containers {
		if tc.Name == containerName {
			c = tc
		}
	}
	if c.Name == "" && len(s.Containers) > 0 {
		c = s.Containers[0]
	}
	c.Name = containerName
	c.Image = spec.Image
	if c.Image == "" {
		c.Image = p.cfg.DefaultImage
	}
	c.Command = []string{agentBinary, "agent", "-socket", agentSocket, "-root", "/", "-workdir", workDir}
	c.Args = nil
	c.WorkingDir = workDir
	c.Ports = nil
	c.LivenessProbe, c.ReadinessProbe, c.StartupProbe = nil, nil, nil
	c.VolumeMounts = append(c.VolumeMounts,
		corev1.VolumeMount{Name: agentVolume, MountPath: agentDir},
		corev1.VolumeMount{Name: workVolume, MountPath: workDir})
	claims, mounts := podVolumes(vols)
	c.VolumeMounts = append(c.VolumeMounts, mounts...)
	work := &corev1.EmptyDirVolumeSource{}
	if r := spec.Resources; r != nil {
		if c.Resources.Limits == nil {
			c.Resources.Limits = corev1.ResourceList{}
		}
		if c.Resources.Requests == nil {
			c.Resources.Requests = corev1.ResourceList{}
		}
		set := func(name corev1.ResourceName, q resource.Quantity) {
			c.Resources.Limits[name] = q
			c.Resources.Requests[name] = q
		}
		if r.CPUMillis > 0 {
			set(corev1.ResourceCPU, *resource.NewMilliQuantity(r.CPUMillis, resource.DecimalSI))
		}
		if r.MemoryMiB > 0 {
			set(corev1.ResourceMemory, *resource.NewQuantity(r.MemoryMiB<<20, resource.BinarySI))
		}
		if r.DiskMiB > 0 {
			q := resource.NewQuantity(r.DiskMiB<<20, resource.BinarySI)
			set(corev1.ResourceEphemeralStorage, *q)
			work.SizeLimit = q
		}
	}
	s.Containers = []corev1.Container{c}

	install := corev1.Container{
		Name:            initName,
		Image:           p.cfg.AgentImage,
		ImagePullPolicy: c.ImagePullPolicy,
		Command:         []string{"/sandboxd", "agent", "install", "-to", installDir + "/sandboxd"},
		VolumeMounts:    []corev1.VolumeMount{{Name: agentVolume, MountPath: installDir}},
	}
	s.InitContainers = append([]corev1.Container{install}, s.InitContainers...)
	s.Volumes = append(s.Volumes,
		corev1.Volume{Name: agentVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: workVolume, VolumeSource: corev1.VolumeSource{EmptyDir: work}})
	s.Volumes = append(s.Volumes, claims...)
	return pod
}

func ptr[T any](v T) *T { return &v }
