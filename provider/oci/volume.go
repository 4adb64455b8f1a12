package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
)

// Persistent volumes (sandbox.Volumes). A volume is a sparse ext4 image of its own under
// <state>/volumes/<name>/, made like a sandbox's disk, with volume.json beside it. Once a sandbox
// has mounted it, the image is mounted on the host, at <name>/mnt, and each sandbox gets an idmapped
// clone of that mount (mount_setattr MOUNT_ATTR_IDMAP with the sandbox's user namespace) bound at its
// mount path: the file system keeps owners as the sandbox sees them (its root is uid 0 on the volume),
// whichever uid range the sandbox that wrote them ran in, so the next sandbox, in another range, finds
// its files its own. Two sandboxes mounting a shared volume share the one mount, never two mounts of
// one image. The host's mount stays from the volume's first use to its deletion (or the machine's
// restart): a sandbox that ends leaves its mount namespace, which holds the volume's file system, to
// the kernel to tear down, in its own time; a second mount of the image made meanwhile, on another
// loop device, would be a second file system over the same blocks, and each would corrupt the
// other's (seen under load as ext4 checksum errors in the next sandbox).
//
// Who mounts what is read from the sandboxes' metadata (meta.Volumes) under volMu, not kept apart, so a
// restarted provider knows it without a record of its own. A volume that is not shared has at most one
// writer: an allocation that would make a second fails.
//
// gVisor sandboxes do not mount volumes (the manifest says so): gVisor's file server has no idmapped
// mount to serve them through.

// volumesDir holds the volumes.
func (p *Provider) volumesDir() string { return filepath.Join(p.cfg.StateDir, "volumes") }

func (p *Provider) volumeDir(name string) string { return filepath.Join(p.volumesDir(), name) }

// volumeRecord is volume.json.
type volumeRecord struct {
	Name      string    `json:"name"`
	SizeMiB   int64     `json:"sizeMiB"`
	Shared    bool      `json:"shared"`
	CreatedAt time.Time `json:"createdAt"`
}

// CreateVolume makes an empty volume of sizeMiB MiB.
func (p *Provider) CreateVolume(ctx context.Context, name string, sizeMiB int64, shared bool) (sandbox.Volume, error) {
	if err := sandbox.CheckVolumeName(name); err != nil {
		return sandbox.Volume{}, err
	}
	if sizeMiB < 4 || sizeMiB > p.cfg.MaxDiskMiB {
		return sandbox.Volume{}, fmt.Errorf("volume %q: sizeMiB %d: want 4 to %d: %w", name, sizeMiB, p.cfg.MaxDiskMiB, sandbox.ErrInvalidRequest)
	}
	p.volMu.Lock()
	defer p.volMu.Unlock()
	dir := p.volumeDir(name)
	if _, err := os.Stat(dir); err == nil {
		return sandbox.Volume{}, fmt.Errorf("volume %q exists: %w", name, sandbox.ErrInvalidState)
	}
	if err := os.MkdirAll(p.volumesDir(), 0o700); err != nil {
		return sandbox.Volume{}, fmt.Errorf("volume %q: %v: %w", name, err, sandbox.ErrProviderUnavailable)
	}
	// Made aside and renamed into place: a crash half-way leaves a .new-* directory, removed at the
	// next start, never a volume without its image.
	tmp, err := os.MkdirTemp(p.volumesDir(), ".new-")
	if err != nil {
		return sandbox.Volume{}, fmt.Errorf("volume %q: %v: %w", name, err, sandbox.ErrProviderUnavailable)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	rec := volumeRecord{Name: name, SizeMiB: sizeMiB, Shared: shared, CreatedAt: time.Now().UTC()}
	if err := mkfs(ctx, filepath.Join(tmp, "disk.img"), sizeMiB); err != nil {
		return sandbox.Volume{}, fmt.Errorf("volume %q: %v: %w", name, err, sandbox.ErrProviderUnavailable)
	}
	if err := writeJSONFile(filepath.Join(tmp, "volume.json"), rec); err != nil {
		return sandbox.Volume{}, fmt.Errorf("volume %q: %v: %w", name, err, sandbox.ErrProviderUnavailable)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return sandbox.Volume{}, fmt.Errorf("volume %q: %v: %w", name, err, sandbox.ErrProviderUnavailable)
	}
	return p.volumeOf(rec, nil), nil
}

// GetVolume returns one volume.
func (p *Provider) GetVolume(ctx context.Context, name string) (sandbox.Volume, error) {
	if err := sandbox.CheckVolumeName(name); err != nil {
		return sandbox.Volume{}, err
	}
	p.volMu.Lock()
	defer p.volMu.Unlock()
	rec, err := p.readVolume(name)
	if err != nil {
		return sandbox.Volume{}, err
	}
	users, err := p.volumeUsers(name)
	if err != nil {
		return sandbox.Volume{}, err
	}
	return p.volumeOf(rec, users), nil
}

// ListVolumes returns every volume.
func (p *Provider) ListVolumes(ctx context.Context) ([]sandbox.Volume, error) {
	p.volMu.Lock()
	defer p.volMu.Unlock()
	ents, err := os.ReadDir(p.volumesDir())
	if errors.Is(err, os.ErrNotExist) {
		return []sandbox.Volume{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("volumes: %v: %w", err, sandbox.ErrProviderUnavailable)
	}
	out := []sandbox.Volume{}
	for _, e := range ents {
		if sandbox.CheckVolumeName(e.Name()) != nil {
			continue // a .new-* left by a crash
		}
		rec, err := p.readVolume(e.Name())
		if err != nil {
			continue
		}
		users, err := p.volumeUsers(e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, p.volumeOf(rec, users))
	}
	return out, nil
}

// DeleteVolume removes a volume no sandbox of the provider mounts.
func (p *Provider) DeleteVolume(ctx context.Context, name string) error {
	if err := sandbox.CheckVolumeName(name); err != nil {
		return err
	}
	p.volMu.Lock()
	defer p.volMu.Unlock()
	if _, err := p.readVolume(name); err != nil {
		return err
	}
	users, err := p.volumeUsers(name)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return fmt.Errorf("volume %q is mounted by %v: %w", name, users, sandbox.ErrInvalidState)
	}
	dir := p.volumeDir(name)
	if err := unmountVolume(dir); err != nil {
		return fmt.Errorf("volume %q: %v: %w", name, err, sandbox.ErrProviderUnavailable)
	}
	// Renamed aside first: a crash during the removal leaves a .new-* directory, not half a volume.
	gone := filepath.Join(p.volumesDir(), ".new-gone-"+name)
	if err := os.Rename(dir, gone); err != nil {
		return fmt.Errorf("volume %q: %v: %w", name, err, sandbox.ErrProviderUnavailable)
	}
	return os.RemoveAll(gone)
}

func (p *Provider) readVolume(name string) (volumeRecord, error) {
	var rec volumeRecord
	raw, err := os.ReadFile(filepath.Join(p.volumeDir(name), "volume.json"))
	if errors.Is(err, os.ErrNotExist) {
		return rec, fmt.Errorf("no volume %q: %w", name, sandbox.ErrNotFound)
	}
	if err == nil {
		err = json.Unmarshal(raw, &rec)
	}
	if err != nil {
		return rec, fmt.Errorf("volume %q: %v: %w", name, err, sandbox.ErrProviderUnavailable)
	}
	return rec, nil
}

func (p *Provider) volumeOf(rec volumeRecord, users []sandbox.Ref) sandbox.Volume {
	v := sandbox.Volume{Name: rec.Name, SizeMiB: rec.SizeMiB, Shared: rec.Shared, CreatedAt: rec.CreatedAt, AttachedTo: []sandbox.ID{}}
	for _, u := range users {
		v.AttachedTo = append(v.AttachedTo, u.ID)
	}
	var st unix.Stat_t
	if unix.Stat(filepath.Join(p.volumeDir(rec.Name), "disk.img"), &st) == nil {
		used := st.Blocks * 512 // what the image holds on the host: at most its size
		v.UsedBytes = &used
	}
	return v
}

// volumeUsers lists the sandbox generations of the provider whose metadata mounts the volume. Called
// with volMu held.
func (p *Provider) volumeUsers(name string) ([]sandbox.Ref, error) {
	ents, err := os.ReadDir(p.boxDir)
	if err != nil {
		return nil, fmt.Errorf("volumes: %v: %w", err, sandbox.ErrProviderUnavailable)
	}
	var out []sandbox.Ref
	for _, e := range ents {
		m, err := readMetaFile(layout{dir: filepath.Join(p.boxDir, e.Name())})
		if err != nil {
			continue
		}
		if slices.ContainsFunc(m.Volumes, func(v sandbox.VolumeMount) bool { return v.Name == name }) {
			out = append(out, m.Ref)
		}
	}
	return out, nil
}

// claimVolumes checks, for a sandbox about to mount vols, that each exists and that none it would
// write is written by another sandbox unless shared. Called with volMu held, until the sandbox's
// metadata names its volumes, so two allocations cannot both pass. Errors: ErrNotFound,
// errVolumeInUse.
func (p *Provider) claimVolumes(ref sandbox.Ref, vols []sandbox.VolumeMount) error {
	for _, v := range vols {
		rec, err := p.readVolume(v.Name)
		if err != nil {
			return err
		}
		if v.ReadOnly || rec.Shared {
			continue
		}
		ents, err := os.ReadDir(p.boxDir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			m, err := readMetaFile(layout{dir: filepath.Join(p.boxDir, e.Name())})
			if err != nil || m.Ref == ref {
				continue
			}
			if slices.ContainsFunc(m.Volumes, func(o sandbox.VolumeMount) bool { return o.Name == v.Name && !o.ReadOnly }) {
				return fmt.Errorf("volume %q is mounted writable by sandbox %s: %w", v.Name, m.Ref, errVolumeInUse)
			}
		}
	}
	return nil
}

// errVolumeInUse: a second writer of a volume that is not shared.
var errVolumeInUse = errors.New("volume in use")

// reasonVolumeInUse is the failure code of a sandbox whose volume another sandbox writes.
const reasonVolumeInUse = "volume_in_use"

// volumeClone is where the idmapped clone of a sandbox's i-th volume is, in its directory.
func (l layout) volumeClone(i int) string { return filepath.Join(l.dir, "vol", strconv.Itoa(i)) }

// mountVolumes makes, for each of m's volumes, the host's mount of the volume (when it has none yet)
// and the sandbox's idmapped clone of it, in the user namespace at userns. Called with volMu held.
func (p *Provider) mountVolumes(l layout, m meta, userns string) error {
	for i, v := range m.Volumes {
		dir := p.volumeDir(v.Name)
		mnt := filepath.Join(dir, "mnt")
		if !mounted(mnt) {
			if err := os.MkdirAll(mnt, 0o700); err != nil {
				return err
			}
			if err := mountLoop(filepath.Join(dir, "disk.img"), mnt); err != nil {
				return fmt.Errorf("volume %q: %w", v.Name, err)
			}
		}
		if err := idmappedClone(mnt, l.volumeClone(i), userns, v.ReadOnly); err != nil {
			return fmt.Errorf("volume %q: %w", v.Name, err)
		}
	}
	return nil
}

// idmappedClone mounts at dst a clone of the mount at src whose owners are mapped through the user
// namespace at userns: the file system's uid 0 is the namespace's root.
func idmappedClone(src, dst, userns string, readOnly bool) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", src, err)
	}
	defer unix.Close(tree)
	ns, err := unix.Open(userns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(ns)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Userns_fd: uint64(ns)}
	if readOnly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("mount_setattr idmap: %w", err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s: %w", dst, err)
	}
	return nil
}

// unmountVolumeClones takes the sandbox's clones of its volumes off the host (the container keeps
// its own mounts of them), and fails if one is still there: what removes the directory next must
// never reach into a volume.
func unmountVolumeClones(l layout) error {
	ents, err := os.ReadDir(filepath.Join(l.dir, "vol"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		dir := filepath.Join(l.dir, "vol", e.Name())
		if mounted(dir) {
			if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
				return fmt.Errorf("unmount %s: %w", dir, err)
			}
		}
		if mounted(dir) {
			return fmt.Errorf("%s is still mounted", dir)
		}
	}
	return nil
}

// unmountVolume takes the host's mount of a volume off, when it has one.
func unmountVolume(dir string) error {
	mnt := filepath.Join(dir, "mnt")
	if mounted(mnt) {
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s: %w", mnt, err)
		}
	}
	if mounted(mnt) {
		return fmt.Errorf("%s is still mounted", mnt)
	}
	return nil
}

// tidyVolumes, at start, removes what a crash left among the volumes: .new-* directories, an image
// made or a volume deleted half-way.
func (p *Provider) tidyVolumes() {
	p.volMu.Lock()
	defer p.volMu.Unlock()
	ents, err := os.ReadDir(p.volumesDir())
	if err != nil {
		return
	}
	for _, e := range ents {
		if sandbox.CheckVolumeName(e.Name()) == nil {
			continue
		}
		dir := filepath.Join(p.volumesDir(), e.Name())
		if err := unmountVolume(dir); err == nil {
			_ = os.RemoveAll(dir)
		}
	}
}

// volumeRoots are where an oci sandbox may mount volumes: its /workspace, and the empty mount points
// of the shared read-only root (buildRootfs), each at or below which a volume may be mounted.
var volumeRoots = []string{guestWorkdir, "/mnt", "/data", "/srv", "/opt"}

// checkVolumePaths refuses a mount path outside volumeRoots. Errors: ErrInvalidRequest.
func checkVolumePaths(vols []sandbox.VolumeMount) error {
	for _, v := range vols {
		if !slices.ContainsFunc(volumeRoots, func(r string) bool { return v.MountPath == r || strings.HasPrefix(v.MountPath, r+"/") }) {
			return fmt.Errorf("volume %q: mountPath %q: an oci sandbox mounts volumes at or below %s: %w",
				v.Name, v.MountPath, strings.Join(volumeRoots, ", "), sandbox.ErrInvalidRequest)
		}
	}
	return nil
}

// volumeParents are the root's mount points (not /workspace, which is writable) strictly above a
// volume's mount path, which get a tmpfs for the volume's mount point to be made in.
func volumeParents(vols []sandbox.VolumeMount) []string {
	var out []string
	for _, r := range volumeRoots[1:] {
		if slices.ContainsFunc(vols, func(v sandbox.VolumeMount) bool { return strings.HasPrefix(v.MountPath, r+"/") }) &&
			!slices.ContainsFunc(vols, func(v sandbox.VolumeMount) bool { return v.MountPath == r }) {
			out = append(out, r)
		}
	}
	return out
}
