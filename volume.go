package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"time"
)

// VolumesKey is the spec.extensions key of the volumes a sandbox mounts.
const VolumesKey = "sandboxd.volumes"

// Volume is a named, size-bounded file system that outlives the sandboxes that mount it.
type Volume struct {
	Name      string    `json:"name"`
	SizeMiB   int64     `json:"sizeMiB"`
	Shared    bool      `json:"shared"` // more than one sandbox may mount it writable at once
	CreatedAt time.Time `json:"createdAt"`
	UsedBytes *int64    `json:"usedBytes,omitempty"`
	// AttachedTo lists the live sandboxes that mount it, when the caller knows them.
	AttachedTo []ID `json:"attachedTo"`
}

// VolumeMount is one volume a sandbox mounts: an element of spec.extensions["sandboxd.volumes"].
type VolumeMount struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
	ReadOnly  bool   `json:"readOnly,omitempty"`
}

// Volumes is implemented by a provider that keeps persistent volumes (capability persistentVolume).
// The runtime core checks what only the store knows (a live sandbox that mounts the volume); the
// provider what only it knows (its own mounts), and refuses a second writer at allocation too.
type Volumes interface {
	// CreateVolume makes an empty volume. Errors: ErrInvalidState when one of the name exists,
	// ErrInvalidRequest for a size past the provider's bounds.
	CreateVolume(ctx context.Context, name string, sizeMiB int64, shared bool) (Volume, error)
	// GetVolume returns one volume; ErrNotFound when there is none of the name.
	GetVolume(ctx context.Context, name string) (Volume, error)
	// ListVolumes returns every volume, by name.
	ListVolumes(ctx context.Context) ([]Volume, error)
	// DeleteVolume removes a volume and its data. Errors: ErrNotFound, ErrInvalidState while a
	// sandbox of the provider mounts it.
	DeleteVolume(ctx context.Context, name string) error
}

// CheckVolumeName refuses a volume name that is not 1-63 of a-z, 0-9, '.', '_', '-', starting with a
// letter or digit (api/extensions.yaml's pattern). Errors: ErrInvalidRequest.
func CheckVolumeName(name string) error {
	ok := len(name) >= 1 && len(name) <= 63
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '_' || c == '.' || c == '-')
	}
	if !ok {
		return fmt.Errorf("volume name %q: want 1-63 of a-z, 0-9, '.', '_' and '-', from a letter or digit: %w", name, ErrInvalidRequest)
	}
	return nil
}

// reservedMountPaths are where a volume may not be mounted: the sandbox's own machinery and the
// kernel's file systems.
var reservedMountPaths = []string{"/proc", "/sys", "/dev", "/.sandboxd", "/etc", "/usr"}

// VolumeMounts returns the volumes spec mounts, checked: known names form, absolute clean mount paths
// that are not / nor under a reserved path, no name or path twice. Errors: ErrInvalidRequest.
func VolumeMounts(spec Spec) ([]VolumeMount, error) {
	raw, ok := spec.Extensions[VolumesKey]
	if !ok {
		return nil, nil
	}
	var ms []VolumeMount
	if err := json.Unmarshal(raw, &ms); err != nil {
		return nil, fmt.Errorf("extensions %q: %v: %w", VolumesKey, err, ErrInvalidRequest)
	}
	names, paths := map[string]bool{}, map[string]bool{}
	for _, m := range ms {
		if err := CheckVolumeName(m.Name); err != nil {
			return nil, err
		}
		p := m.MountPath
		if !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/" || strings.ContainsAny(p, "\x00\n") {
			return nil, fmt.Errorf("volume %q: mountPath %q must be an absolute, clean path other than /: %w", m.Name, p, ErrInvalidRequest)
		}
		for _, r := range reservedMountPaths {
			if p == r || strings.HasPrefix(p, r+"/") {
				return nil, fmt.Errorf("volume %q: mountPath %q is under %s, which is the sandbox's own: %w", m.Name, p, r, ErrInvalidRequest)
			}
		}
		if names[m.Name] || paths[p] {
			return nil, fmt.Errorf("volume %q at %q: a volume or a mount path is named twice: %w", m.Name, p, ErrInvalidRequest)
		}
		names[m.Name], paths[p] = true, true
	}
	return ms, nil
}
