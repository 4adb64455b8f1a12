package oci

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/image"
)

// The provider's image store, as the daemon's /v1/images operations reach it (sandbox.ImageManager).

var _ sandbox.ImageManager = (*Provider)(nil)

// store is the image store, or ErrUnsupportedCapability where the runtime runs no images.
func (p *Provider) store() (*image.Store, error) {
	if p.images == nil {
		return nil, fmt.Errorf("the %s runtime runs no images: %w", p.runc.class, sandbox.ErrUnsupportedCapability)
	}
	return p.images.store, nil
}

// PullImage fetches ref and names it ref.
func (p *Provider) PullImage(ctx context.Context, ref string, progress func(sandbox.ImageProgress)) (sandbox.ImageInfo, error) {
	s, err := p.store()
	if err != nil {
		return sandbox.ImageInfo{}, err
	}
	img, err := s.Pull(ctx, ref, progress)
	if err != nil {
		return sandbox.ImageInfo{}, err
	}
	p.imagePoolsMoved() // ref may name another digest now
	return p.Image(ctx, img.Digest)
}

// ImportImage adds the layout directory or tarball at path and names it name.
func (p *Provider) ImportImage(ctx context.Context, path, name string, progress func(sandbox.ImageProgress)) (sandbox.ImageInfo, error) {
	s, err := p.store()
	if err != nil {
		return sandbox.ImageInfo{}, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return sandbox.ImageInfo{}, fmt.Errorf("import %s: %v: %w", path, err, sandbox.ErrInvalidRequest)
	}
	var img image.Image
	if st.IsDir() {
		img, err = s.ImportLayout(ctx, path, name, "", progress)
	} else {
		img, err = s.ImportTarball(ctx, path, name, "", progress)
	}
	if errors.Is(err, image.ErrLayerTooLarge) {
		err = fmt.Errorf("%v: %w", err, sandbox.ErrInvalidRequest)
	}
	if err != nil {
		return sandbox.ImageInfo{}, err
	}
	p.imagePoolsMoved() // name may name another digest now
	return p.Image(ctx, img.Digest)
}

// Images lists the images of the store.
func (p *Provider) Images(ctx context.Context) ([]sandbox.ImageInfo, error) {
	s, err := p.store()
	if err != nil {
		return nil, err
	}
	list, err := s.List()
	if err != nil {
		return nil, fmt.Errorf("images: %v: %w", err, sandbox.ErrProviderUnavailable)
	}
	out := make([]sandbox.ImageInfo, 0, len(list))
	for _, e := range list {
		info, err := p.Image(ctx, e.Digest)
		if errors.Is(err, sandbox.ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// Image returns the image ref names.
func (p *Provider) Image(ctx context.Context, ref string) (sandbox.ImageInfo, error) {
	s, err := p.store()
	if err != nil {
		return sandbox.ImageInfo{}, err
	}
	img, err := s.Lookup(ref)
	if err != nil {
		return sandbox.ImageInfo{}, err
	}
	list, err := s.List()
	if err != nil {
		return sandbox.ImageInfo{}, fmt.Errorf("images: %v: %w", err, sandbox.ErrProviderUnavailable)
	}
	info := sandbox.ImageInfo{Digest: img.Digest, Names: []string{}, Layers: len(img.Layers), Env: img.Config.Env,
		WorkingDir: img.Config.WorkingDir, User: img.Config.User}
	for _, e := range list {
		if e.Digest == img.Digest {
			info.Names, info.Users = append(info.Names, e.Names...), e.Users
		}
	}
	return info, nil
}

// RemoveImage forgets ref; refused while a sandbox runs on the image, or idle warm pool entries of it
// wait (imagepool.go).
func (p *Provider) RemoveImage(ctx context.Context, ref string) error {
	s, err := p.store()
	if err != nil {
		return err
	}
	if err := s.Remove(ref); err != nil {
		return p.removeRefused(err, s, ref)
	}
	p.imagePoolsMoved() // a pool's reference may name nothing now
	return nil
}

// PruneImages removes the images and layers nothing holds.
func (p *Provider) PruneImages(ctx context.Context) (int, error) {
	s, err := p.store()
	if err != nil {
		return 0, err
	}
	n, err := s.Prune()
	if err != nil {
		return n, fmt.Errorf("prune images: %v: %w", err, sandbox.ErrProviderUnavailable)
	}
	return n, nil
}
