package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandboxd/sandbox"
)

// Persistent volumes (sandbox.Volumes), with Config.StorageClass: each volume is a
// PersistentVolumeClaim of that class, named from the volume and labelled with the provider's
// instance, which the cluster keeps whatever becomes of the sandboxes and of the daemon. A sandbox
// that mounts volumes (spec.extensions["sandboxd.volumes"]) has them in its Pod as claims, readOnly
// where asked. The claim of a volume that is not shared is ReadWriteOnce, of a shared one
// Config.SharedAccessMode; but ReadWriteOnce is one node, not one Pod, so the one writer of a volume
// that is not shared is the provider's to keep: an allocation that would make a second writer fails
// (volume_in_use), decided under volMu from the API server's list of the namespace's sandbox Pods.

var _ sandbox.Volumes = (*Provider)(nil)

// Labels and annotations of a volume's claim.
const (
	labelVolume      = "sandboxd.io/volume"
	annotationVolume = "sandboxd.io/volume"
	annotationShared = "sandboxd.io/shared"
	annotationSize   = "sandboxd.io/size-mib"
	annotationMade   = "sandboxd.io/created-at"
)

// Volume bounds: the schema's least size, and Config.MaxVolumeMiB's default (1 TiB).
const (
	minVolumeMiB     = 4
	defaultVolumeMiB = 1 << 20
)

// reasonVolumeInUse is the failure code of a sandbox whose volume another sandbox writes.
const reasonVolumeInUse = "volume_in_use"

var errVolumeInUse = errors.New("volume in use")

// claimName is the DNS-safe name of a volume's claim: a cleaned prefix of the name and a hash of the
// whole name, so that distinct names (which may hold '_', or '.' where a DNS name may not) never share one.
func claimName(volume string) string {
	var b strings.Builder
	for _, r := range volume {
		if b.Len() >= 40 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else if b.Len() > 0 && !strings.HasSuffix(b.String(), "-") {
			b.WriteByte('-')
		}
	}
	sum := sha256.Sum256([]byte(volume))
	return "sbx-vol-" + strings.Trim(b.String(), "-") + "-" + hex.EncodeToString(sum[:5])
}

// volumeLabel is a volume name as a label value: itself when it is one, else a hash.
func volumeLabel(volume string) string {
	if validLabelValue(volume) == "" {
		return volume
	}
	sum := sha256.Sum256([]byte(volume))
	return "h-" + hex.EncodeToString(sum[:16])
}

func (p *Provider) volumes() error {
	if p.cfg.StorageClass == "" {
		return fmt.Errorf("kubernetes: volumes need a storage class (--volume-storage-class): %w", sandbox.ErrUnsupportedCapability)
	}
	return nil
}

// CreateVolume makes a claim of sizeMiB MiB of the provider's storage class. Errors:
// ErrInvalidRequest (name or size), ErrInvalidState (a volume of the name exists, or is being
// deleted), ErrUnsupportedCapability (no storage class), ErrProviderUnavailable.
func (p *Provider) CreateVolume(ctx context.Context, name string, sizeMiB int64, shared bool) (sandbox.Volume, error) {
	if err := p.volumes(); err != nil {
		return sandbox.Volume{}, err
	}
	if err := sandbox.CheckVolumeName(name); err != nil {
		return sandbox.Volume{}, err
	}
	if sizeMiB < minVolumeMiB || sizeMiB > p.cfg.MaxVolumeMiB {
		return sandbox.Volume{}, fmt.Errorf("volume %q: sizeMiB %d: want %d to %d: %w", name, sizeMiB, minVolumeMiB, p.cfg.MaxVolumeMiB, sandbox.ErrInvalidRequest)
	}
	mode := corev1.ReadWriteOnce
	if shared {
		mode = p.cfg.SharedAccessMode
	}
	class := p.cfg.StorageClass
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:      claimName(name),
			Namespace: p.cfg.Namespace,
			Labels:    map[string]string{labelManagedBy: managedBy, labelInstance: p.cfg.Instance, labelVolume: volumeLabel(name)},
			Annotations: map[string]string{
				annotationVolume: name,
				annotationShared: strconv.FormatBool(shared),
				annotationSize:   strconv.FormatInt(sizeMiB, 10),
				annotationMade:   time.Now().UTC().Format(time.RFC3339Nano),
			},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{mode},
			StorageClassName: &class,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(sizeMiB<<20, resource.BinarySI),
			}},
		},
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	got, err := p.cs.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Create(ctx, pvc, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return sandbox.Volume{}, fmt.Errorf("volume %q exists (claim %s): %w", name, pvc.Name, sandbox.ErrInvalidState)
	case apierrors.IsInvalid(err):
		return sandbox.Volume{}, fmt.Errorf("volume %q: %v: %w", name, err, sandbox.ErrInvalidRequest)
	case err != nil:
		return sandbox.Volume{}, fmt.Errorf("volume %q: create claim: %v: %w", name, err, sandbox.ErrProviderUnavailable)
	}
	return volumeOf(got)
}

// claim returns the claim of the named volume. Errors: ErrNotFound (none, or one being deleted),
// ErrProviderUnavailable.
func (p *Provider) claim(ctx context.Context, name string) (*corev1.PersistentVolumeClaim, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	pvc, err := p.cs.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Get(ctx, claimName(name), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("no volume %q: %w", name, sandbox.ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("volume %q: get claim: %v: %w", name, err, sandbox.ErrProviderUnavailable)
	case pvc.Annotations[annotationVolume] != name || pvc.Labels[labelInstance] != p.cfg.Instance:
		return nil, fmt.Errorf("no volume %q (claim %s is another's): %w", name, pvc.Name, sandbox.ErrNotFound)
	case pvc.DeletionTimestamp != nil:
		return nil, fmt.Errorf("volume %q is being deleted: %w", name, sandbox.ErrNotFound)
	}
	return pvc, nil
}

// GetVolume returns one volume. Errors: ErrNotFound, ErrProviderUnavailable.
func (p *Provider) GetVolume(ctx context.Context, name string) (sandbox.Volume, error) {
	if err := p.volumes(); err != nil {
		return sandbox.Volume{}, err
	}
	if err := sandbox.CheckVolumeName(name); err != nil {
		return sandbox.Volume{}, err
	}
	pvc, err := p.claim(ctx, name)
	if err != nil {
		return sandbox.Volume{}, err
	}
	return volumeOf(pvc)
}

// ListVolumes returns the provider's volumes, by name.
func (p *Provider) ListVolumes(ctx context.Context) ([]sandbox.Volume, error) {
	if err := p.volumes(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	list, err := p.cs.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: p.selector.String()})
	if err != nil {
		return nil, fmt.Errorf("volumes: list claims: %v: %w", err, sandbox.ErrProviderUnavailable)
	}
	out := []sandbox.Volume{}
	for i := range list.Items {
		pvc := &list.Items[i]
		if pvc.DeletionTimestamp != nil || pvc.Name != claimName(pvc.Annotations[annotationVolume]) {
			continue
		}
		v, err := volumeOf(pvc)
		if err != nil {
			p.log.Warn("a volume claim the provider cannot read", "claim", pvc.Name, "err", err)
			continue
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b sandbox.Volume) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// DeleteVolume deletes a volume's claim, which its storage class's reclaim policy then frees, and
// waits for the claim to go. Errors: ErrNotFound, ErrInvalidState while a Pod of a sandbox mounts
// it, ErrProviderUnavailable.
func (p *Provider) DeleteVolume(ctx context.Context, name string) error {
	if err := p.volumes(); err != nil {
		return err
	}
	if err := sandbox.CheckVolumeName(name); err != nil {
		return err
	}
	p.volMu.Lock()
	defer p.volMu.Unlock()
	pvc, err := p.claim(ctx, name)
	if err != nil {
		return err
	}
	users, err := p.claimUsers(ctx, pvc.Name)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return fmt.Errorf("volume %q is mounted by the Pods %v: %w", name, users, sandbox.ErrInvalidState)
	}
	claims := p.cs.CoreV1().PersistentVolumeClaims(p.cfg.Namespace)
	dctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	err = claims.Delete(dctx, pvc.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pvc.UID}})
	cancel()
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("volume %q: delete claim: %v: %w", name, err, sandbox.ErrProviderUnavailable)
	}
	deadline := time.Now().Add(p.cfg.CallTimeout)
	for delay := 20 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		gctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
		got, err := claims.Get(gctx, pvc.Name, metav1.GetOptions{})
		cancel()
		if apierrors.IsNotFound(err) || (err == nil && got.UID != pvc.UID) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("volume %q: its claim is still there %v after its deletion: %w", name, p.cfg.CallTimeout, sandbox.ErrProviderUnavailable)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("volume %q: waiting for its claim to go: %w", name, errors.Join(ctx.Err(), sandbox.ErrProviderUnavailable))
		case <-time.After(delay):
		}
	}
}

func volumeOf(pvc *corev1.PersistentVolumeClaim) (sandbox.Volume, error) {
	size, err := strconv.ParseInt(pvc.Annotations[annotationSize], 10, 64)
	if err != nil {
		return sandbox.Volume{}, fmt.Errorf("claim %s: size annotation: %v: %w", pvc.Name, err, sandbox.ErrProviderProtocol)
	}
	made, err := time.Parse(time.RFC3339Nano, pvc.Annotations[annotationMade])
	if err != nil {
		made = pvc.CreationTimestamp.UTC()
	}
	return sandbox.Volume{
		Name:       pvc.Annotations[annotationVolume],
		SizeMiB:    size,
		Shared:     pvc.Annotations[annotationShared] == "true",
		CreatedAt:  made,
		AttachedTo: []sandbox.ID{},
	}, nil
}

// claimUsers lists the sandbox Pods of the namespace (of any instance) that mount the claim and have
// not ended; with writers, only those that mount it writable. The list is the API server's, not the
// informer's, so that a Pod just made is in it.
func (p *Provider) claimUsers(ctx context.Context, claim string, writers ...bool) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	sel := labels.SelectorFromSet(labels.Set{labelManagedBy: managedBy}).String()
	list, err := p.cs.CoreV1().Pods(p.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("volumes: list Pods: %v: %w", err, sandbox.ErrProviderUnavailable)
	}
	var out []string
	for _, pod := range list.Items {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			if c := v.PersistentVolumeClaim; c != nil && c.ClaimName == claim && !(len(writers) > 0 && c.ReadOnly) {
				out = append(out, pod.Name)
				break
			}
		}
	}
	return out, nil
}

// claimVolumes checks, for ref's Pod about to mount vols, that each volume exists and that none it
// would write has another writer unless shared. Called with volMu held until the Pod is made.
// Errors: ErrInvalidRequest (a volume that does not exist), errVolumeInUse, ErrProviderUnavailable.
func (p *Provider) claimVolumes(ctx context.Context, name string, vols []sandbox.VolumeMount) error {
	for _, v := range vols {
		pvc, err := p.claim(ctx, v.Name)
		if errors.Is(err, sandbox.ErrNotFound) {
			return fmt.Errorf("extensions %q: %v: %w", sandbox.VolumesKey, err, sandbox.ErrInvalidRequest)
		}
		if err != nil {
			return err
		}
		if v.ReadOnly || pvc.Annotations[annotationShared] == "true" {
			continue
		}
		writers, err := p.claimUsers(ctx, pvc.Name, true)
		if err != nil {
			return err
		}
		if others := slices.DeleteFunc(writers, func(w string) bool { return w == name }); len(others) > 0 {
			return fmt.Errorf("volume %q is mounted writable by the Pod %s: %w", v.Name, others[0], errVolumeInUse)
		}
	}
	return nil
}

// Where a volume may not be mounted in the Pod: the agent's directory, and the working directory's own
// mount (a mount below it is fine).
func checkMountPaths(spec sandbox.Spec) error {
	ms, err := sandbox.VolumeMounts(spec)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if m.MountPath == workDir || m.MountPath == agentDir || strings.HasPrefix(m.MountPath, agentDir+"/") {
			return fmt.Errorf("volume %q: mountPath %q is the Pod's own: %w", m.Name, m.MountPath, sandbox.ErrInvalidRequest)
		}
	}
	return nil
}

// podVolumes are the Pod's volumes and the sandbox container's mounts for the volumes spec mounts.
func podVolumes(ms []sandbox.VolumeMount) ([]corev1.Volume, []corev1.VolumeMount) {
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	for i, m := range ms {
		name := "sandboxd-volume-" + strconv.Itoa(i)
		vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName(m.Name), ReadOnly: m.ReadOnly},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: m.MountPath, ReadOnly: m.ReadOnly})
	}
	return vols, mounts
}
