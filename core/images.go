package core

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandbox"
)

// images is the provider's image manager, once the manifest says it runs images.
//
// Errors: ErrUnsupportedCapability.
func (r *Runtime) images() (sandbox.ImageManager, error) {
	if err := r.require(sandbox.CapImageReference); err != nil {
		return nil, err
	}
	im, ok := r.prov.(sandbox.ImageManager)
	if !ok {
		return nil, fmt.Errorf("provider %q keeps no images of its own: %w", r.cachedManifest().Name, sandbox.ErrUnsupportedCapability)
	}
	return im, nil
}

// PullImage fetches ref into the provider's image store; progress, when not nil, is told how far it
// has come. Errors: as sandbox.ImageManager's, and ErrUnsupportedCapability.
func (r *Runtime) PullImage(ctx context.Context, ref string, progress func(sandbox.ImageProgress)) (sandbox.ImageInfo, error) {
	im, err := r.images()
	if err != nil {
		return sandbox.ImageInfo{}, err
	}
	return im.PullImage(ctx, ref, progress)
}

// ImportImage adds the image of path on the daemon's host. Errors: as PullImage.
func (r *Runtime) ImportImage(ctx context.Context, path, name string, progress func(sandbox.ImageProgress)) (sandbox.ImageInfo, error) {
	im, err := r.images()
	if err != nil {
		return sandbox.ImageInfo{}, err
	}
	return im.ImportImage(ctx, path, name, progress)
}

// Images lists the provider's images. Errors: ErrUnsupportedCapability.
func (r *Runtime) Images(ctx context.Context) ([]sandbox.ImageInfo, error) {
	im, err := r.images()
	if err != nil {
		return nil, err
	}
	return im.Images(ctx)
}

// Image returns one image. Errors: ErrNotFound, ErrUnsupportedCapability.
func (r *Runtime) Image(ctx context.Context, ref string) (sandbox.ImageInfo, error) {
	im, err := r.images()
	if err != nil {
		return sandbox.ImageInfo{}, err
	}
	return im.Image(ctx, ref)
}

// RemoveImage forgets an image. Errors: ErrNotFound, ErrInvalidState (in use), ErrUnsupportedCapability.
func (r *Runtime) RemoveImage(ctx context.Context, ref string) error {
	im, err := r.images()
	if err != nil {
		return err
	}
	return im.RemoveImage(ctx, ref)
}

// PruneImages removes what nothing holds. Errors: ErrUnsupportedCapability.
func (r *Runtime) PruneImages(ctx context.Context) (int, error) {
	im, err := r.images()
	if err != nil {
		return 0, err
	}
	return im.PruneImages(ctx)
}
