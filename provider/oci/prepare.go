package oci

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandbox"
)

// A sandbox whose image the store lacks is prepared (sandbox.Preparer): the core moves it to starting,
// Prepare pulls the image under the core's preparation bound rather than a provider call's, and
// Allocate then finds it in the store. From NeedsPreparation until Allocate or Release, a marker,
// preparing/<name>.json, says so: Observe reports the generation as starting (preparing) while it has
// no directory, during the pull as after a restart that cut it short, when the core pulls again (the
// store clears what a killed pull left at Open, and keeps the layers it completed).

func (p *Provider) preparingPath(ref sandbox.Ref) string {
	return filepath.Join(p.cfg.StateDir, "preparing", ref.Name()+".json")
}

// NeedsPreparation reports whether the image of spec must be pulled before Allocate of ref, and if so
// marks ref as being prepared. A sandbox without an image, of a template, or of an image the store
// holds needs none; neither does one whose image cannot be had at all (Allocate says why).
func (p *Provider) NeedsPreparation(_ context.Context, ref sandbox.Ref, spec sandbox.Spec) (bool, error) {
	if spec.Image == "" || p.images == nil {
		return false, nil
	}
	digest, fetch, err := p.imageSource(ref, spec.Image)
	if err != nil || fetch == "" {
		return false, nil
	}
	if digest != "" {
		if _, err := p.images.store.Lookup(digest); !errors.Is(err, sandbox.ErrNotFound) {
			return false, nil
		}
	}
	path := p.preparingPath(ref)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return false, err
	}
	return true, writeJSONFile(path, ref)
}

// Prepare pulls the image of spec for ref. A pull the core cancels (it is closing) leaves ref marked:
// the next start prepares it again. Any other failure is ref's (image_not_found, image_pull_failed,
// image_invalid), its preparation over.
func (p *Provider) Prepare(ctx context.Context, ref sandbox.Ref, spec sandbox.Spec) (sandbox.Observation, error) {
	var err error
	if spec.Image != "" && p.images != nil {
		var digest, fetch string
		if digest, fetch, err = p.imageSource(ref, spec.Image); err == nil {
			_, err = p.ensureImage(ctx, spec.Image, digest, fetch)
		}
	}
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		return sandbox.Observation{}, err
	}
	if err != nil {
		os.Remove(p.preparingPath(ref))
		return imageFailure(ref, spec, err), nil
	}
	return sandbox.Observation{Ref: ref, State: sandbox.ObservedStarting, Reason: sandbox.ReasonPreparing}, nil
}

// isPreparing reports whether ref is marked as being prepared.
func (p *Provider) isPreparing(ref sandbox.Ref) bool {
	_, err := os.Stat(p.preparingPath(ref))
	return err == nil
}

// donePreparing removes ref's mark, if it has one.
func (p *Provider) donePreparing(ref sandbox.Ref) {
	if err := os.Remove(p.preparingPath(ref)); err != nil && !os.IsNotExist(err) {
		p.log.Warn("removing a preparation's mark", "sandbox", ref, "err", err)
	}
}

// preparingRefs lists the generations marked as being prepared.
func (p *Provider) preparingRefs() []sandbox.Ref {
	ents, _ := os.ReadDir(filepath.Join(p.cfg.StateDir, "preparing"))
	var refs []sandbox.Ref
	for _, e := range ents {
		n, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(p.cfg.StateDir, "preparing", e.Name()))
		var ref sandbox.Ref
		if err != nil || json.Unmarshal(raw, &ref) != nil || ref.Name() != n {
			continue
		}
		refs = append(refs, ref)
	}
	return refs
}
