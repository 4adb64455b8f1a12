package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/image"
)

// A snapshot of a sandbox is its overlay's upper directory captured as one more layer over the image
// it runs on, recorded in the image store as an image (image/snapshot.go): a sandbox of a snapshot or
// of a template is a sandbox of an image, with an upper of its own, so a fork of N is N sandboxes that
// share every byte they have not written. The sandbox is frozen (runc pause, as Pause does) while its
// upper is read, so the snapshot is one instant of it.

var _ sandbox.Snapshotter = (*Provider)(nil)

// TemplateExtension is the providerExtensions key under which a sandbox of a template or a snapshot
// reports the reference it was given and the digest it runs.
const TemplateExtension = "sandboxd.template"

// reasonTemplateNotFound: the store has no such template, version or snapshot.
const reasonTemplateNotFound = "template_not_found"

// Snapshot captures the filesystem of ref's sandbox as a new snapshot, a version of the template
// opts.Name when that is set.
func (p *Provider) Snapshot(ctx context.Context, ref sandbox.Ref, opts sandbox.SnapshotOptions) (sandbox.SnapshotInfo, error) {
	s, err := p.store()
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	b := p.box(ref)
	b.mu.Lock()
	defer b.mu.Unlock()
	m, err := readMeta(b.l)
	if os.IsNotExist(err) {
		return sandbox.SnapshotInfo{}, fmt.Errorf("snapshot %s: %w", ref, sandbox.ErrNotFound)
	}
	if err != nil {
		return sandbox.SnapshotInfo{}, fmt.Errorf("snapshot %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
	}
	if m.Image == nil {
		return sandbox.SnapshotInfo{}, fmt.Errorf("snapshot %s: it runs on the shared root, not an image or a template of its own: %w", ref, sandbox.ErrInvalidState)
	}
	st, err := p.runc.state(ctx, b.container())
	if errors.Is(err, errNoContainer) {
		return sandbox.SnapshotInfo{}, fmt.Errorf("snapshot %s: %w", ref, sandbox.ErrNotFound)
	}
	if err != nil {
		return sandbox.SnapshotInfo{}, fmt.Errorf("snapshot %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
	}
	switch st.Status {
	case "paused":
	case "running":
		// The marker says to a provider started after a crash that the freeze was the snapshot's.
		if err := os.WriteFile(b.l.snapshotMarker(), nil, 0o600); err != nil {
			return sandbox.SnapshotInfo{}, fmt.Errorf("snapshot %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
		}
		if _, err := p.runc.simple(ctx, "pause", b.container()); err != nil {
			os.Remove(b.l.snapshotMarker())
			return sandbox.SnapshotInfo{}, fmt.Errorf("snapshot %s: freeze: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
		}
		defer func() {
			if _, err := p.runc.simple(context.WithoutCancel(ctx), "resume", b.container()); err != nil {
				p.log.Error("thawing a sandbox after its snapshot", "sandbox", ref, "err", err)
				return
			}
			os.Remove(b.l.snapshotMarker())
		}()
	default:
		return sandbox.SnapshotInfo{}, fmt.Errorf("snapshot %s: container is %s: %w", ref, st.Status, sandbox.ErrInvalidState)
	}
	upper, done, err := openUpper(b.l, m)
	if err != nil {
		return sandbox.SnapshotInfo{}, fmt.Errorf("snapshot %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
	}
	defer done()
	sn, err := s.SnapshotOf(ctx, image.Capture{
		Upper:  upper,
		IDBase: m.IDBase, IDSize: IDRangeSize,
		// What the upper holds is on the sandbox's disk: a file that says it is larger is sparse.
		MaxBytes: int64(m.Resources.DiskMiB) << 20,
		Name:     opts.Name, Env: opts.Env, WorkingDir: opts.WorkingDir,
		Origin: image.Origin{Sandbox: string(ref.ID), Generation: int64(ref.Generation), Base: m.Image.Digest},
	})
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	if opts.Name != "" {
		p.imagePoolsMoved() // a new version of a template
	}
	return snapshotInfo(sn), nil
}

func snapshotInfo(sn image.Snapshot) sandbox.SnapshotInfo {
	out := sandbox.SnapshotInfo{ID: sn.Digest, Digest: sn.Digest, SandboxID: sandbox.ID(sn.Origin.Sandbox),
		Generation: sandbox.Generation(sn.Origin.Generation), BaseDigest: sn.Origin.Base, CreatedAt: sn.Origin.Created,
		Layers: sn.Layers, Users: sn.Users, Templates: sn.Templates}
	if out.Templates == nil {
		out.Templates = []string{}
	}
	return out
}

// Snapshots lists the snapshots of the store.
func (p *Provider) Snapshots(context.Context) ([]sandbox.SnapshotInfo, error) {
	s, err := p.store()
	if err != nil {
		return nil, err
	}
	list, err := s.Snapshots()
	if err != nil {
		return nil, fmt.Errorf("snapshots: %v: %w", err, sandbox.ErrProviderUnavailable)
	}
	out := make([]sandbox.SnapshotInfo, 0, len(list))
	for _, sn := range list {
		out = append(out, snapshotInfo(sn))
	}
	return out, nil
}

// GetSnapshot returns the snapshot id.
func (p *Provider) GetSnapshot(_ context.Context, id string) (sandbox.SnapshotInfo, error) {
	s, err := p.store()
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	sn, err := s.GetSnapshot(id)
	if errors.Is(err, sandbox.ErrInvalidRequest) {
		err = fmt.Errorf("snapshot %s: %w", id, sandbox.ErrNotFound) // no id of a snapshot at all
	}
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	return snapshotInfo(sn), nil
}

// RemoveSnapshot removes the snapshot id; refused while a sandbox runs on it.
func (p *Provider) RemoveSnapshot(ctx context.Context, id string) error {
	s, err := p.store()
	if err != nil {
		return err
	}
	if _, err := p.GetSnapshot(ctx, id); err != nil {
		return err
	}
	return p.removed(s.RemoveSnapshot(id))
}

// removed is the answer to a removal from the store that ended with err: a refusal because something
// holds what it would remove is ErrInvalidState; a removal done may have moved an image pool's
// reference.
func (p *Provider) removed(err error) error {
	if err == nil {
		p.imagePoolsMoved()
	}
	return inUse(err)
}

func inUse(err error) error {
	if errors.Is(err, image.ErrInUse) {
		return fmt.Errorf("%v: %w", err, sandbox.ErrInvalidState)
	}
	return err
}

// Templates lists the templates of the store.
func (p *Provider) Templates(context.Context) ([]sandbox.TemplateInfo, error) {
	s, err := p.store()
	if err != nil {
		return nil, err
	}
	list, err := s.Templates()
	if err != nil {
		return nil, fmt.Errorf("templates: %v: %w", err, sandbox.ErrProviderUnavailable)
	}
	out := make([]sandbox.TemplateInfo, 0, len(list))
	for _, t := range list {
		out = append(out, templateInfo(t))
	}
	return out, nil
}

func templateInfo(t image.Template) sandbox.TemplateInfo {
	out := sandbox.TemplateInfo{Name: t.Name, Versions: []sandbox.TemplateVersion{}}
	for _, v := range t.Versions {
		out.Versions = append(out.Versions, sandbox.TemplateVersion{Version: v.Version, Digest: v.Digest, CreatedAt: v.Created, Users: v.Users})
	}
	return out
}

// Template returns the template ref names.
func (p *Provider) Template(_ context.Context, ref string) (sandbox.TemplateInfo, error) {
	s, err := p.store()
	if err != nil {
		return sandbox.TemplateInfo{}, err
	}
	t, err := s.GetTemplate(ref)
	if err != nil {
		return sandbox.TemplateInfo{}, err
	}
	return templateInfo(t), nil
}

// RemoveTemplate removes the versions ref names; refused while a sandbox runs on one.
func (p *Provider) RemoveTemplate(_ context.Context, ref string) error {
	s, err := p.store()
	if err != nil {
		return err
	}
	return p.removed(s.RemoveTemplate(ref))
}

// pin is what a sandbox's first run of a template name resolved it to, in template-pins/<id>.json, or
// of an image tag, in image-pins/<id>.json: a recreate of the same reference runs the same snapshot or
// image, not a newer version of the name.
type pin struct {
	Reference string `json:"reference"`
	Digest    string `json:"digest"`
}

func (p *Provider) pinPath(id sandbox.ID) string {
	return filepath.Join(p.cfg.StateDir, "template-pins", string(id)+".json")
}

// readPin reads the pin at path; false when there is none, or none that reads.
func readPin(path string) (pin, bool) {
	var was pin
	raw, err := os.ReadFile(path)
	return was, err == nil && json.Unmarshal(raw, &was) == nil && was.Digest != ""
}

func writePin(path string, v pin) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return writeJSONFile(path, v)
}

// templateDigest is the snapshot the template reference tref names for the sandbox of ref: the one an
// earlier generation of it ran from the same reference, or what the store resolves it to now.
func (p *Provider) templateDigest(ref sandbox.Ref, tref string) (string, error) {
	s := p.images.store
	name, ver, digest, err := image.ParseTemplateRef(tref)
	if err != nil {
		return "", err
	}
	if name == "" || ver != 0 || digest != "" {
		return s.ResolveTemplate(tref) // pinned by the reference itself
	}
	if was, ok := readPin(p.pinPath(ref.ID)); ok && was.Reference == tref {
		if _, err := s.GetSnapshot(was.Digest); err != nil {
			return "", fmt.Errorf("template %s: the snapshot %s an earlier generation ran: %w", tref, was.Digest, err)
		}
		return was.Digest, nil
	}
	d, err := s.ResolveTemplate(tref)
	if err != nil {
		return "", err
	}
	return d, writePin(p.pinPath(ref.ID), pin{Reference: tref, Digest: d})
}

// openUpper returns a path at which the upper directory of the sandbox of l, m can be read, and what
// to call once done with it. A disk's host mount is detached once the container runs (start), so the
// upper on a disk is reached through a detached, read-only mount of the disk's file system, made of
// the loop device whose backing file is the sandbox's disk image: the same superblock as the
// container's, named by nothing the sandbox controls.
func openUpper(l layout, m meta) (string, func(), error) {
	upper := filepath.Join(l.upperBase(m.Disk), "image-upper")
	if !m.Disk || isMountPoint(l.diskDir()) {
		return upper, func() {}, nil
	}
	dev, err := loopOf(l.diskImg())
	if err != nil {
		return "", nil, err
	}
	fsfd, err := unix.Fsopen("ext4", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return "", nil, fmt.Errorf("fsopen ext4: %w", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigSetString(fsfd, "source", dev); err != nil {
		return "", nil, fmt.Errorf("disk %s: %w%s", dev, err, fsLog(fsfd))
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return "", nil, fmt.Errorf("disk %s: %w%s", dev, err, fsLog(fsfd))
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return "", nil, fmt.Errorf("fsmount %s: %w", dev, err)
	}
	return fmt.Sprintf("/proc/self/fd/%d/image-upper", mfd), func() { unix.Close(mfd) }, nil
}

// isMountPoint reports whether dir is on another file system than its parent.
func isMountPoint(dir string) bool {
	var a, b unix.Stat_t
	if unix.Lstat(dir, &a) != nil || unix.Lstat(filepath.Dir(dir), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

// loopOf finds the loop device whose backing file is img.
func loopOf(img string) (string, error) {
	want, err := os.Stat(img)
	if err != nil {
		return "", err
	}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if st, err := os.Stat(strings.TrimSpace(string(raw))); err == nil && os.SameFile(st, want) {
			return "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f))), nil
		}
	}
	return "", fmt.Errorf("no loop device backs %s", img)
}

// snapshotMarker is there while a snapshot holds the sandbox frozen.
func (l layout) snapshotMarker() string { return filepath.Join(l.dir, "snapshotting") }

// thawSnapshots resumes the sandboxes an earlier provider froze for a snapshot it did not finish
// (killed meanwhile): what the snapshot made is tmp/'s, cleared by the store; the sandbox runs on.
func (p *Provider) thawSnapshots(ctx context.Context) {
	marks, _ := filepath.Glob(filepath.Join(p.boxDir, "*", "snapshotting"))
	for _, mark := range marks {
		l := layout{dir: filepath.Dir(mark)}
		m, err := readMeta(l)
		if err != nil {
			continue
		}
		name := m.Container
		if name == "" {
			name = m.Ref.Name()
		}
		if st, err := p.runc.state(ctx, name); err == nil && st.Status == "paused" {
			if _, err := p.runc.simple(ctx, "resume", name); err != nil {
				p.log.Warn("thawing a sandbox a killed snapshot froze", "sandbox", m.Ref, "err", err)
				continue
			}
		}
		os.Remove(mark)
	}
}
