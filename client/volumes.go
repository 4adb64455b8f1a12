package client

import (
	"context"
	"encoding/json"
	"net/url"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

// CreateVolume makes an empty persistent volume of sizeMiB MiB; shared lets more than one sandbox
// mount it writable at once. Sandboxes mount it through spec.extensions["sandboxd.volumes"] (see
// VolumeMounts). Errors: ErrInvalidRequest, ErrInvalidState (the name is taken),
// ErrUnsupportedCapability.
func (c *Client) CreateVolume(ctx context.Context, name string, sizeMiB int64, shared bool) (*sandbox.Volume, error) {
	var v sandbox.Volume
	if err := c.do(ctx, call{method: "POST", path: "/v1/volumes", body: api.VolumeCreate{Name: name, SizeMiB: sizeMiB, Shared: shared}}, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Volume returns one volume, with the live sandboxes that mount it. Errors: ErrNotFound.
func (c *Client) Volume(ctx context.Context, name string) (*sandbox.Volume, error) {
	var v sandbox.Volume
	if err := c.do(ctx, call{method: "GET", path: "/v1/volumes/" + url.PathEscape(name), safe: true}, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Volumes lists every volume.
func (c *Client) Volumes(ctx context.Context) ([]sandbox.Volume, error) {
	var out api.VolumeList
	if err := c.do(ctx, call{method: "GET", path: "/v1/volumes", safe: true}, &out); err != nil {
		return nil, err
	}
	return out.Volumes, nil
}

// DeleteVolume removes a volume and its data. Errors: ErrNotFound, ErrInvalidState while a sandbox
// that is not terminated mounts it.
func (c *Client) DeleteVolume(ctx context.Context, name string) error {
	return c.do(ctx, call{method: "DELETE", path: "/v1/volumes/" + url.PathEscape(name)}, nil)
}

// VolumeMounts returns spec with its sandboxd.volumes extension set to mounts.
func VolumeMounts(spec sandbox.Spec, mounts ...sandbox.VolumeMount) (sandbox.Spec, error) {
	raw, err := json.Marshal(mounts)
	if err != nil {
		return spec, err
	}
	ext := make(map[string]json.RawMessage, len(spec.Extensions)+1)
	for k, v := range spec.Extensions {
		ext[k] = v
	}
	ext[sandbox.VolumesKey] = raw
	spec.Extensions = ext
	return spec, nil
}
