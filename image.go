package sandbox

import "context"

// ImageInfo is an image a provider holds: its digest, the names it is known by, and its config's
// environment, working directory and user.
type ImageInfo struct {
	Digest     string   `json:"digest"`
	Names      []string `json:"names"`
	Layers     int      `json:"layers"`
	Users      int      `json:"users"` // the sandboxes that run on it
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
	User       string   `json:"user,omitempty"`
}

// ImageProgress is how far a pull or an import has come: layers in the store of the image's, and for a
// pull the compressed bytes fetched of the layers' total (TotalBytes is 0 where it is not known: an
// import). A layer the store held already counts as fetched.
type ImageProgress struct {
	Layers      int   `json:"layers"`
	TotalLayers int   `json:"totalLayers"`
	Bytes       int64 `json:"bytes"`
	TotalBytes  int64 `json:"totalBytes"`
}

// ImageManager is implemented by a provider that keeps images for spec.image (imageReference).
type ImageManager interface {
	// PullImage fetches ref from its registry and names it ref. Errors: ErrInvalidRequest for a
	// malformed reference, ErrNotFound when the registry has no such image, ErrProviderUnavailable.
	// progress, when not nil, is told how far it has come, from the goroutine doing the work.
	PullImage(ctx context.Context, ref string, progress func(ImageProgress)) (ImageInfo, error)
	// ImportImage adds the image of path on the provider's host, an OCI layout directory or a
	// `docker save` / oci-archive tarball, and names it name. Errors: ErrInvalidRequest. progress: as
	// PullImage's.
	ImportImage(ctx context.Context, path, name string, progress func(ImageProgress)) (ImageInfo, error)
	// Images lists the images held.
	Images(ctx context.Context) ([]ImageInfo, error)
	// Image returns the image ref names (a name, name@digest or a digest). Errors: ErrNotFound.
	Image(ctx context.Context, ref string) (ImageInfo, error)
	// RemoveImage forgets ref. Errors: ErrNotFound, ErrInvalidState while a sandbox runs on it.
	RemoveImage(ctx context.Context, ref string) error
	// PruneImages removes what no name and no sandbox holds, and says how many layers went.
	PruneImages(ctx context.Context) (int, error)
}
