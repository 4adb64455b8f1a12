package oci

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/image"
)

// Warm pools per image: Config.ImagePools names images (or templates) of which the provider keeps
// started containers ready, as the warm pool of pool.go does for the shared root. An entry of an image
// is a pool entry like the others, under <state>/pool, on the image's root (mountImage) instead of the
// shared one, and holds the image in the store under its own name (Acquire) from before its directory
// is laid out until it is discarded or taken.
//
// The pool's reference is resolved to a digest when the pool is filled: an image reference through the
// store (pulled when the store lacks it, as a create would: Ensure), a template reference to its
// newest version (or the one it pins). A create takes an entry when its own spec.image or spec.template
// resolves to the same digest, however it is spelled, and the rest of its spec is what any pool entry
// serves (no volumes, the default disk: Allocate). Such a create resolves its reference without
// pulling or holding the image (pooledImage) and, when an entry of that digest is idle, takes it: the
// entry's metadata is rewritten to record the sandbox's reference, the entry's hold on the image
// becomes the sandbox's in one step of the store (Transfer: the image is held throughout), a tag's
// digest is pinned for the sandbox's later generations, and then the directory is renamed the
// sandbox's (claim). Without an idle entry the create finds and holds the image as any other does
// (holdImage). Anything else is a cold create.
//
// A reference that moves (a name pulled or imported anew, a template given a newer version, a name
// removed) makes the pool resolve it again: every operation of the provider that can move one says so
// (imagePoolsMoved), and the filler discards the idle entries of the digest it no longer names and
// warms entries of the new one. A create that resolves to the new digest is never handed an entry of
// the old one, as entries match by digest.
//
// Removing an image (or a template's version) the idle entries hold is refused, as while a sandbox
// runs on it: the pool is the daemon's configuration, which would warm it again at once. Entries left
// by a provider that died are discarded at the next start with the rest of <state>/pool, and their
// holds with them (openImages gives up holds by names with no sandbox directory).

// ImagePool configures a warm pool of one image or template (Config.ImagePools).
type ImagePool struct {
	// Ref is an image reference (a name the store holds or pulls, or name@sha256:…) or, with Template,
	// a template reference (name, name@version, name@sha256:…, or a snapshot's digest).
	Ref      string
	Template bool
	// Size is how many started containers of it are kept ready.
	Size int
}

// imagePool is the idle entries of one ImagePool and what its reference resolved to.
type imagePool struct {
	entries
	cfg ImagePool

	// Under entries.mu: the digest the entries are warmed of, and whether cfg.Ref may name another
	// now (imagePoolsMoved), to be resolved before the next fill.
	digest string
	moved  bool
}

// newImagePools checks cfgs and returns their pools. Errors: a reference that does not parse, a size
// that is not positive, a reference configured twice, any pool on a runtime that runs no images
// (gVisor).
func newImagePools(cfgs []ImagePool, class runtimeClass) ([]*imagePool, error) {
	if len(cfgs) > 0 && class != classRunc {
		return nil, fmt.Errorf("oci: warm pools of images: the %s runtime runs no images", class)
	}
	seen := map[ImagePool]bool{}
	var out []*imagePool
	for _, c := range cfgs {
		var err error
		if c.Template {
			_, _, _, err = image.ParseTemplateRef(c.Ref)
		} else {
			_, _, err = image.Normalize(c.Ref)
		}
		switch key := (ImagePool{Ref: c.Ref, Template: c.Template}); {
		case err != nil:
			return nil, fmt.Errorf("oci: warm pool of %s: %w", c.Ref, err)
		case c.Size <= 0:
			return nil, fmt.Errorf("oci: warm pool of %s: size %d is not positive", c.Ref, c.Size)
		case seen[key]:
			return nil, fmt.Errorf("oci: warm pool of %s: configured twice", c.Ref)
		default:
			seen[key] = true
		}
		out = append(out, &imagePool{cfg: c, moved: true})
	}
	return out, nil
}

// fillImagePool keeps q's entries idle, of what its reference names now, until ctx ends.
func (p *Provider) fillImagePool(ctx context.Context, q *imagePool) {
	p.keepFilled(ctx, "starting a warm pool entry of an image", q.kick, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.moved || len(q.idle) < q.cfg.Size
	}, func() error {
		digest, err := p.resolvePooled(ctx, q.cfg)
		if err != nil {
			return fmt.Errorf("%s: %w", q.cfg.Ref, err)
		}
		q.mu.Lock()
		q.digest, q.moved = digest, false
		var stale []poolEntry
		for _, e := range q.idle {
			if e.img.Digest != digest {
				stale = append(stale, e)
			}
		}
		q.idle = slices.DeleteFunc(q.idle, func(e poolEntry) bool { return e.img.Digest != digest })
		short := len(q.idle) < q.cfg.Size
		q.mu.Unlock()
		for _, e := range stale {
			p.log.Info("discarding a warm pool entry of an image its reference no longer names", "entry", e.name,
				"reference", q.cfg.Ref, "digest", e.img.Digest, "now", digest)
			if err := p.discardEntry(context.WithoutCancel(ctx), e); err != nil {
				p.log.Error("discarding a pool entry", "entry", e.name, "err", err)
			}
		}
		if !short {
			return nil
		}
		e, err := p.warm(ctx, &imageInfo{Reference: q.cfg.Ref, Digest: digest, Template: q.cfg.Template})
		p.refillSpares() // the entry may have taken one
		if err != nil {
			return fmt.Errorf("%s (%s): %w", q.cfg.Ref, digest, err)
		}
		q.add(e)
		return nil
	})
}

// resolvePooled is the digest c's reference names now: an image pulled when the store lacks it, a
// template's newest version (or the one its reference pins).
func (p *Provider) resolvePooled(ctx context.Context, c ImagePool) (string, error) {
	if c.Template {
		return p.images.store.ResolveTemplate(c.Ref)
	}
	img, err := p.images.store.Ensure(ctx, c.Ref)
	return img.Digest, err
}

// serves reports whether q warms entries of digest.
func (q *imagePool) serves(digest string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.digest == digest
}

// imagePoolsMoved tells every image pool that its reference may name another digest now: the store
// has been given an image or a template version, or lost a name.
func (p *Provider) imagePoolsMoved() {
	for _, q := range p.imagePools {
		q.mu.Lock()
		q.moved = true
		q.mu.Unlock()
		q.refill()
	}
}

// releaseEntryImage gives up the pool entry e's hold on its image, if it runs on one.
func (p *Provider) releaseEntryImage(e poolEntry) error {
	if e.img == nil {
		return nil
	}
	return p.images.store.Release(e.img.Digest, e.name)
}

// pooledHolds says, for a refused removal, how many of the holders of digest are idle warm pool
// entries; "" when none are.
func (p *Provider) pooledHolds(digest string) string {
	n := 0
	for _, q := range p.imagePools {
		q.mu.Lock()
		for _, e := range q.idle {
			if e.img.Digest == digest {
				n++
			}
		}
		q.mu.Unlock()
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d of them idle warm pool entries the daemon is configured to keep of it)", n)
}

// removeRefused is err, a refused removal of what ref names (ErrInUse), as ErrInvalidState, saying
// which of its holders are warm pool entries.
func (p *Provider) removeRefused(err error, s *image.Store, ref string) error {
	if !errors.Is(err, image.ErrInUse) {
		return err
	}
	var pooled string
	if img, lerr := s.Lookup(ref); lerr == nil {
		pooled = p.pooledHolds(img.Digest)
	}
	return fmt.Errorf("%v%s: %w", err, pooled, sandbox.ErrInvalidState)
}
