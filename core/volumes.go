package core

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sandboxd/sandbox"
)

// Persistent volumes outlive the sandboxes that mount them (spec.extensions["sandboxd.volumes"]).
// The provider keeps them (sandbox.Volumes); the core adds what only the store knows: which live
// sandboxes name a volume. A volume a live sandbox names is not deleted, and a create naming a volume
// that does not exist is refused before anything is recorded. A second writer of a volume that is not
// shared is the provider's to refuse, at allocation (failure code volume_in_use): only it knows, at
// that moment, what is mounted.

func (r *Runtime) volumes() (sandbox.Volumes, error) {
	if err := r.require(sandbox.CapPersistentVolume); err != nil {
		return nil, err
	}
	v, ok := r.prov.(sandbox.Volumes)
	if !ok {
		return nil, fmt.Errorf("provider %q keeps no volumes: %w", r.cachedManifest().Name, sandbox.ErrUnsupportedCapability)
	}
	return v, nil
}

// CreateVolume makes an empty volume. Errors: ErrUnsupportedCapability, ErrInvalidRequest,
// ErrInvalidState (the name is taken), ErrProviderUnavailable.
func (r *Runtime) CreateVolume(ctx context.Context, name string, sizeMiB int64, shared bool) (sandbox.Volume, error) {
	if err := sandbox.CheckVolumeName(name); err != nil {
		return sandbox.Volume{}, err
	}
	vs, err := r.volumes()
	if err != nil {
		return sandbox.Volume{}, err
	}
	var v sandbox.Volume
	err = r.call(ctx, "create volume", func(ctx context.Context) (err error) {
		v, err = vs.CreateVolume(ctx, name, sizeMiB, shared)
		return err
	})
	if err != nil {
		return sandbox.Volume{}, err
	}
	return r.withUsers(ctx, v)
}

// GetVolume returns one volume and the live sandboxes that name it. Errors: ErrNotFound.
func (r *Runtime) GetVolume(ctx context.Context, name string) (sandbox.Volume, error) {
	if err := sandbox.CheckVolumeName(name); err != nil {
		return sandbox.Volume{}, err
	}
	vs, err := r.volumes()
	if err != nil {
		return sandbox.Volume{}, err
	}
	var v sandbox.Volume
	if err := r.call(ctx, "get volume", func(ctx context.Context) (err error) {
		v, err = vs.GetVolume(ctx, name)
		return err
	}); err != nil {
		return sandbox.Volume{}, err
	}
	return r.withUsers(ctx, v)
}

// ListVolumes returns every volume.
func (r *Runtime) ListVolumes(ctx context.Context) ([]sandbox.Volume, error) {
	vs, err := r.volumes()
	if err != nil {
		return nil, err
	}
	var list []sandbox.Volume
	if err := r.call(ctx, "list volumes", func(ctx context.Context) (err error) {
		list, err = vs.ListVolumes(ctx)
		return err
	}); err != nil {
		return nil, err
	}
	users, err := r.volumeUsers(ctx)
	if err != nil {
		return nil, err
	}
	for i := range list {
		list[i] = attached(list[i], users)
	}
	return list, nil
}

// DeleteVolume removes a volume and its data. Errors: ErrNotFound, ErrInvalidState while a live
// sandbox names it (or the provider still mounts it).
func (r *Runtime) DeleteVolume(ctx context.Context, name string) error {
	if err := sandbox.CheckVolumeName(name); err != nil {
		return err
	}
	vs, err := r.volumes()
	if err != nil {
		return err
	}
	users, err := r.volumeUsers(ctx)
	if err != nil {
		return err
	}
	if len(users[name]) > 0 {
		return fmt.Errorf("volume %q is named by live sandboxes %v: terminate them first: %w", name, users[name], sandbox.ErrInvalidState)
	}
	return r.call(ctx, "delete volume", func(ctx context.Context) error { return vs.DeleteVolume(ctx, name) })
}

// withUsers sets v.AttachedTo to the live sandboxes that name it.
func (r *Runtime) withUsers(ctx context.Context, v sandbox.Volume) (sandbox.Volume, error) {
	users, err := r.volumeUsers(ctx)
	if err != nil {
		return v, err
	}
	return attached(v, users), nil
}

// attached is v with AttachedTo set from users, by volume name (never nil: the answer lists none).
func attached(v sandbox.Volume, users map[string][]sandbox.ID) sandbox.Volume {
	v.AttachedTo = users[v.Name]
	if v.AttachedTo == nil {
		v.AttachedTo = []sandbox.ID{}
	}
	return v
}

// volumeUsers maps each volume name to the sandboxes not terminated whose spec mounts it.
func (r *Runtime) volumeUsers(ctx context.Context) (map[string][]sandbox.ID, error) {
	list, err := r.store.List(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]sandbox.ID{}
	for _, sb := range list {
		if sb.State == sandbox.StateTerminated {
			continue
		}
		ms, err := sandbox.VolumeMounts(sb.Spec)
		if err != nil {
			continue
		}
		for _, m := range ms {
			if !slices.Contains(out[m.Name], sb.ID) {
				out[m.Name] = append(out[m.Name], sb.ID)
			}
		}
	}
	return out, nil
}

// checkVolumes refuses a spec naming a volume that does not exist, before anything is recorded.
// Errors: ErrInvalidRequest.
func (r *Runtime) checkVolumes(ctx context.Context, spec sandbox.Spec) error {
	ms, err := sandbox.VolumeMounts(spec)
	if err != nil || len(ms) == 0 {
		return err
	}
	vs, err := r.volumes()
	if err != nil {
		return err
	}
	for _, m := range ms {
		err := r.call(ctx, "get volume", func(ctx context.Context) error {
			_, err := vs.GetVolume(ctx, m.Name)
			return err
		})
		if err != nil {
			if errors.Is(err, sandbox.ErrNotFound) {
				return fmt.Errorf("extensions %q: no volume %q: create it first (POST /v1/volumes): %w", sandbox.VolumesKey, m.Name, sandbox.ErrInvalidRequest)
			}
			return err
		}
	}
	return nil
}
