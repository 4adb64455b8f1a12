package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/sandboxd/sandbox"
)

// ErrInUse is returned by Remove for an image a sandbox holds.
var ErrInUse = errors.New("image in use")

// refNameAnnotation is the annotation an OCI layout names its images by.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// ImportLayout adds the image of the OCI image layout at dir and names it nameStr. The layout's
// index must hold one image for linux on this machine's architecture, or one whose ref.name
// annotation is pick (a tag, or a full name). Errors: ErrInvalidRequest for an unusable layout or name.
func (s *Store) ImportLayout(ctx context.Context, dir, nameStr, pick string, progress func(Progress)) (Image, error) {
	ref, err := s.importName(nameStr)
	if err != nil {
		return Image{}, err
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return Image{}, fmt.Errorf("layout %s: %v: %w", dir, err, sandbox.ErrInvalidRequest)
	}
	img, err := pickImage(idx, pick)
	if err != nil {
		return Image{}, fmt.Errorf("layout %s: %v: %w", dir, err, sandbox.ErrInvalidRequest)
	}
	return s.addNamed(ctx, img, ref, progress, true)
}

// ImportTarball adds the image of the tarball at path, a `docker save` archive or an oci-archive (a
// tarred OCI layout), and names it nameStr. pick chooses among several images as for ImportLayout
// (for a `docker save` archive, one of its repo tags). Errors: as ImportLayout.
func (s *Store) ImportTarball(ctx context.Context, path, nameStr, pick string, progress func(Progress)) (Image, error) {
	ref, err := s.importName(nameStr)
	if err != nil {
		return Image{}, err
	}
	oci, err := isOCIArchive(path)
	if err != nil {
		return Image{}, fmt.Errorf("tarball %s: %v: %w", path, err, sandbox.ErrInvalidRequest)
	}
	if oci {
		dir, err := os.MkdirTemp(s.tmpDir(), "archive-")
		if err != nil {
			return Image{}, err
		}
		defer os.RemoveAll(dir)
		if err := extractArchive(path, dir); err != nil {
			return Image{}, fmt.Errorf("tarball %s: %v: %w", path, err, sandbox.ErrInvalidRequest)
		}
		return s.ImportLayout(ctx, dir, nameStr, pick, progress)
	}
	var tag *name.Tag
	if pick != "" {
		t, err := name.NewTag(pick, local)
		if err != nil {
			return Image{}, fmt.Errorf("tag %q: %v: %w", pick, err, sandbox.ErrInvalidRequest)
		}
		tag = &t
	}
	img, err := tarball.ImageFromPath(path, tag)
	if err == nil {
		_, err = img.Manifest()
	}
	if err != nil {
		return Image{}, fmt.Errorf("tarball %s: %v: %w", path, err, sandbox.ErrInvalidRequest)
	}
	return s.addNamed(ctx, img, ref, progress, false)
}

// importName parses the name an import is given.
func (s *Store) importName(nameStr string) (name.Reference, error) {
	ref, err := name.ParseReference(nameStr, local)
	if err != nil {
		return nil, fmt.Errorf("image name %q: %v: %w", nameStr, err, sandbox.ErrInvalidRequest)
	}
	if _, ok := ref.(name.Digest); ok {
		return nil, fmt.Errorf("image name %q: an import is named by a tag, not a digest: %w", nameStr, sandbox.ErrInvalidRequest)
	}
	return ref, nil
}

func (s *Store) addNamed(ctx context.Context, img v1.Image, ref name.Reference, progress func(Progress), countBytes bool) (Image, error) {
	out, err := s.add(ctx, img, progress, countBytes)
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrLayerTooLarge) {
			return Image{}, err
		}
		return Image{}, fmt.Errorf("import %s: %v: %w", ref.Name(), err, sandbox.ErrInvalidRequest)
	}
	if err := s.name(ref.Name(), out.Digest); err != nil {
		return Image{}, err
	}
	return out, nil
}

// pickImage finds the one image of idx that pick names, or the one for this machine.
func pickImage(idx v1.ImageIndex, pick string) (v1.Image, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var found []v1.Descriptor
	for _, d := range im.Manifests {
		if !d.MediaType.IsImage() {
			continue
		}
		if pick != "" {
			n := d.Annotations[refNameAnnotation]
			if n != pick && !strings.HasSuffix(pick, ":"+n) {
				continue
			}
		} else if d.Platform != nil && !d.Platform.Satisfies(hostPlatform()) {
			continue
		}
		found = append(found, d)
	}
	switch len(found) {
	case 0:
		return nil, errors.New("no image in the layout fits")
	case 1:
		return idx.Image(found[0].Digest)
	}
	return nil, fmt.Errorf("%d images in the layout fit: name one", len(found))
}

// isOCIArchive reports whether the tarball at path is a tarred OCI layout (it has an oci-layout file).
func isOCIArchive(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if filepath.Clean(hdr.Name) == "oci-layout" {
			return true, nil
		}
	}
}

// extractArchive extracts the regular files and directories of the tarred layout at path into dir;
// nothing else a layout holds, and no entry outside dir.
func extractArchive(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		n := filepath.Clean(hdr.Name)
		if !filepath.IsLocal(n) {
			return fmt.Errorf("entry %q is outside the layout", hdr.Name)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(n, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := root.MkdirAll(filepath.Dir(n), 0o700); err != nil {
				return err
			}
			out, err := root.OpenFile(n, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// Acquire holds the image digest for user (a sandbox's name), so that no Remove or Prune takes it,
// and returns it. Holding it again is a no-op. Errors: ErrNotFound when the store has no such image.
func (s *Store) Acquire(digest, user string) (Image, error) {
	if !validDigest(digest) || !safeUser(user) {
		return Image{}, fmt.Errorf("hold %s for %q: %w", digest, user, sandbox.ErrInvalidRequest)
	}
	s.lockAll()
	defer s.unlockAll()
	img, err := s.lookupLocked(digest)
	if err != nil {
		return Image{}, err
	}
	if err := os.MkdirAll(s.usersDir(digest), 0o700); err != nil {
		return Image{}, err
	}
	f, err := os.OpenFile(filepath.Join(s.usersDir(digest), user), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return Image{}, err
	}
	return img, f.Close()
}

// Release gives up user's hold on digest. Releasing what is not held succeeds.
func (s *Store) Release(digest, user string) error {
	if !validDigest(digest) || !safeUser(user) {
		return fmt.Errorf("release %s for %q: %w", digest, user, sandbox.ErrInvalidRequest)
	}
	s.lockAll()
	defer s.unlockAll()
	err := os.Remove(filepath.Join(s.usersDir(digest), user))
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	os.Remove(s.usersDir(digest)) // when it was the last
	return nil
}

// Transfer makes from's hold on digest to's, in one step: the image is held throughout, by one or the
// other, and a hold to had already stays. Errors: ErrNotFound when from does not hold digest (nothing
// changed).
func (s *Store) Transfer(digest, from, to string) error {
	if !validDigest(digest) || !safeUser(from) || !safeUser(to) {
		return fmt.Errorf("hold %s: %q to %q: %w", digest, from, to, sandbox.ErrInvalidRequest)
	}
	s.lockAll()
	defer s.unlockAll()
	err := os.Rename(filepath.Join(s.usersDir(digest), from), filepath.Join(s.usersDir(digest), to))
	if os.IsNotExist(err) {
		return fmt.Errorf("hold %s by %q: %w", digest, from, sandbox.ErrNotFound)
	}
	return err
}

// safeUser reports whether user can be a file name in the store.
func safeUser(user string) bool {
	return user != "" && user != "." && user != ".." && !strings.ContainsAny(user, "/\x00")
}

// Users lists who holds digest.
func (s *Store) Users(digest string) ([]string, error) {
	s.lockAll()
	defer s.unlockAll()
	return s.usersLocked(digest)
}

func (s *Store) usersLocked(digest string) ([]string, error) {
	ents, err := os.ReadDir(s.usersDir(digest))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out, nil
}

// Entry is an image as List shows it.
type Entry struct {
	Digest string
	Names  []string
	Layers int
	Users  int
}

// List returns the stored images, by digest.
func (s *Store) List() ([]Entry, error) {
	s.lockAll()
	defer s.unlockAll()
	recs, err := s.records()
	if err != nil {
		return nil, err
	}
	refs, err := s.refs()
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, r := range recs {
		e := Entry{Digest: r.Digest, Layers: len(r.DiffIDs)}
		for n, d := range refs {
			if d == r.Digest {
				e.Names = append(e.Names, n)
			}
		}
		sort.Strings(e.Names)
		users, err := s.usersLocked(r.Digest)
		if err != nil {
			return nil, err
		}
		e.Users = len(users)
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Digest < out[j].Digest })
	return out, nil
}

// Remove forgets ref: a name drops that name, a digest the image and every name of it; an image left
// without a name is removed once no sandbox holds it. Its layers stay until Prune. Errors: ErrNotFound,
// ErrInUse (nothing removed) when a sandbox holds the image and ref would remove it.
func (s *Store) Remove(ref string) error {
	s.lockAll()
	defer s.unlockAll()
	digest, err := s.resolveLocked(ref)
	if err != nil {
		return err
	}
	if _, err := os.Stat(s.recordPath(digest)); err != nil {
		return fmt.Errorf("image %s: %w", ref, sandbox.ErrNotFound)
	}
	refs, err := s.refs()
	if err != nil {
		return err
	}
	drop := func(n string) bool { return validDigest(ref) || strings.Contains(ref, "@") || n == normalized(ref) }
	left := false
	for n, d := range refs {
		if d == digest && !drop(n) {
			left = true
		}
	}
	users, err := s.usersLocked(digest)
	if err != nil {
		return err
	}
	if !left && len(users) > 0 {
		return fmt.Errorf("image %s: held by %d sandboxes: %w", ref, len(users), ErrInUse)
	}
	for n, d := range refs {
		if d == digest && drop(n) {
			delete(refs, n)
		}
	}
	if err := s.writeMeta(s.refsPath(), refs); err != nil {
		return err
	}
	if !left {
		if r, err := s.readRecord(digest); err == nil && r.Snapshot != nil {
			// A snapshot goes with its template versions, as RemoveSnapshot takes it.
			return s.removeDigestsLocked([]string{digest}, func(string, version) bool { return true })
		}
		return s.removeRecord(digest)
	}
	return nil
}

func normalized(ref string) string {
	if r, err := name.ParseReference(ref, local); err == nil {
		return r.Name()
	}
	return ref
}

// Prune removes the layers no recorded image has and the images no name, no sandbox and no snapshot
// record holds, and
// returns how many layers it removed.
func (s *Store) Prune() (int, error) {
	s.lockAll()
	defer s.unlockAll()
	refs, err := s.refs()
	if err != nil {
		return 0, err
	}
	recs, err := s.records()
	if err != nil {
		return 0, err
	}
	keep := map[string]bool{}
	for _, r := range recs {
		users, err := s.usersLocked(r.Digest)
		if err != nil {
			return 0, err
		}
		named := r.Snapshot != nil // a snapshot stays until it is removed
		for _, d := range refs {
			named = named || d == r.Digest
		}
		if !named && len(users) == 0 {
			if err := s.removeRecord(r.Digest); err != nil {
				return 0, err
			}
			continue
		}
		for _, d := range r.DiffIDs {
			keep[hexOf(d)] = true
		}
	}
	ents, err := os.ReadDir(filepath.Join(s.cfg.Dir, "layers"))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if keep[e.Name()] || s.inflight[e.Name()] > 0 {
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.cfg.Dir, "layers", e.Name())); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func hostPlatform() v1.Platform { return v1.Platform{OS: "linux", Architecture: hostArch} }
