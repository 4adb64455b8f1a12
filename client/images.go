package client

import (
	"context"
	"net/url"

	"github.com/sandboxd/sandbox"
)

// PullImage fetches ref from its registry into the daemon's image store and returns it once it is
// there. Errors: ErrInvalidRequest, ErrNotFound (no such image), ErrUnsupportedCapability (the
// provider runs no images), ErrProviderUnavailable (the registry cannot be reached).
func (c *Client) PullImage(ctx context.Context, ref string) (*sandbox.ImageInfo, error) {
	var info sandbox.ImageInfo
	err := c.do(ctx, call{method: "POST", path: "/v1/images/pull", body: map[string]string{"reference": ref}, safe: true}, &info)
	if err != nil {
		return nil, err
	}
	return &info, nil
}

// ImportImage adds the image of path on the daemon's host (an OCI layout directory, or a docker-save
// or oci-archive tarball) and names it name. Errors: ErrInvalidRequest, ErrUnsupportedCapability.
func (c *Client) ImportImage(ctx context.Context, path, name string) (*sandbox.ImageInfo, error) {
	var info sandbox.ImageInfo
	err := c.do(ctx, call{method: "POST", path: "/v1/images/import", body: map[string]string{"path": path, "name": name}, safe: true}, &info)
	if err != nil {
		return nil, err
	}
	return &info, nil
}

// Images lists the daemon's images. Errors: ErrUnsupportedCapability.
func (c *Client) Images(ctx context.Context) ([]sandbox.ImageInfo, error) {
	var out struct {
		Images []sandbox.ImageInfo `json:"images"`
	}
	if err := c.do(ctx, call{method: "GET", path: "/v1/images", safe: true}, &out); err != nil {
		return nil, err
	}
	return out.Images, nil
}

// Image returns the image of a manifest digest. Errors: ErrNotFound, ErrUnsupportedCapability.
func (c *Client) Image(ctx context.Context, digest string) (*sandbox.ImageInfo, error) {
	var info sandbox.ImageInfo
	if err := c.do(ctx, call{method: "GET", path: "/v1/images/digest/" + url.PathEscape(digest), safe: true}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// RemoveImage forgets ref: a name that name, a digest the image and all its names. Errors:
// ErrNotFound, ErrInvalidState (a sandbox runs on it), ErrUnsupportedCapability.
func (c *Client) RemoveImage(ctx context.Context, ref string) error {
	return c.do(ctx, call{method: "POST", path: "/v1/images/remove", body: map[string]string{"reference": ref}}, nil)
}

// PruneImages removes the images and layers nothing holds, and says how many layers went.
func (c *Client) PruneImages(ctx context.Context) (int, error) {
	var out struct {
		LayersRemoved int `json:"layersRemoved"`
	}
	if err := c.do(ctx, call{method: "POST", path: "/v1/images/prune", safe: true}, &out); err != nil {
		return 0, err
	}
	return out.LayersRemoved, nil
}
