package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/moby/sys/user"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/image"
)

// A sandbox with spec.image runs on the image instead of the shared read-only root: its root is an
// overlay of the image's layers, each unpacked once in the provider's image store (package image),
// under an upper directory of its generation's own on its disk. The agent is bound in read-only at
// its usual path and stays PID 1; the image's Env and WorkingDir are the agent's, so its commands
// and file calls start from them.
//
// Ownership: the layers keep the owners their tars say (root is 0 on disk), and every sandbox has a
// uid range of its own, so no one copy of a layer can be owned by every sandbox's range. Each lower
// layer is therefore an idmapped mount of the layer's directory, mapped through the sandbox's user
// namespace (the holder made for it, userns.go): uid 0 of the layer is the range's first uid, and
// shows as 0 inside. The overlay takes its layers as descriptors (fsconfig "lowerdir+"), so no mount
// option string bounds how many an image may have. Files the sandbox writes land in the upper
// directory, owned by its range as /workspace's are.
//
// The digest the sandbox runs is recorded in its metadata and held in the store (Acquire, or the hold
// of the warm pool entry it takes, Transfer) until its directory is removed, so the image is not removed under it; the store does not pull a name it holds
// again, so a recreate from the same reference runs the same bytes. A sandbox of spec.template runs
// the same way on a snapshot (snapshots.go).

// ImageExtension is the providerExtensions key under which a sandbox from an image reports it.
const ImageExtension = "sandboxd.image"

// Failure reasons of a sandbox whose image cannot be had.
const (
	reasonImageNotFound = "image_not_found"   // the registry or the store has no such image
	reasonImageInvalid  = "image_invalid"     // the reference or the image is unusable
	reasonImagePull     = "image_pull_failed" // the registry could not be reached or failed
)

// imageInfo is what providerExtensions says of a sandbox's image.
type imageInfo struct {
	Reference string `json:"reference"`
	Digest    string `json:"digest"`
	// Template says Reference is spec.template's (a template or a snapshot), not spec.image's.
	Template bool `json:"template,omitempty"`
}

// imageState is the provider's image store and what it knows of its sandboxes' images.
type imageState struct {
	store *image.Store
	known sync.Map // sandbox name -> json.RawMessage of its imageInfo, or nil for none
}

// openImages opens the provider's image store under its state directory and gives up the holds of
// sandboxes whose directories are gone (a crash between a hold and the metadata that records it).
func (p *Provider) openImages() error {
	s, err := image.Open(image.Config{Dir: filepath.Join(p.cfg.StateDir, "images"), Insecure: p.cfg.InsecureRegistries,
		MaxLayerBytes: p.cfg.MaxLayerBytes})
	if err != nil {
		return err
	}
	p.images = &imageState{store: s}
	list, err := s.List()
	if err != nil {
		return err
	}
	for _, e := range list {
		users, err := s.Users(e.Digest)
		if err != nil {
			return err
		}
		for _, u := range users {
			m, err := readMeta(layout{dir: filepath.Join(p.boxDir, u)})
			if err == nil && m.Image != nil && m.Image.Digest == e.Digest {
				continue
			}
			if err != nil && !os.IsNotExist(err) {
				continue // unreadable: kept, as the sandbox may be there
			}
			if err := s.Release(e.Digest, u); err != nil {
				return err
			}
		}
	}
	return nil
}

// ImageStore is the provider's image store; nil on a runtime that runs no images (gVisor).
func (p *Provider) ImageStore() *image.Store {
	if p.images == nil {
		return nil
	}
	return p.images.store
}

// checkImage refuses, before anything is recorded, a spec.image that names no image at all.
func (p *Provider) checkImage(spec sandbox.Spec) error {
	if spec.Image == "" && spec.Template == "" {
		return nil
	}
	if p.images == nil {
		return fmt.Errorf("spec.image or spec.template: the %s runtime runs no images: %w", p.runc.class, sandbox.ErrUnsupportedCapability)
	}
	if spec.Template != "" {
		_, _, _, err := image.ParseTemplateRef(spec.Template)
		return err
	}
	_, _, err := image.Normalize(spec.Image)
	return err
}

// holdImage finds (pulling it if needed) the image of spec and holds it for ref, or returns the
// failed observation that says why it cannot be had. A sandbox of an image by tag runs, in every
// generation, the digest its first ran (imageSource).
func (p *Provider) holdImage(ctx context.Context, ref sandbox.Ref, spec sandbox.Spec) (*imageInfo, *sandbox.Observation) {
	var img image.Image
	var err error
	if spec.Template != "" {
		var digest string
		if digest, err = p.templateDigest(ref, spec.Template); err == nil {
			img, err = p.images.store.Acquire(digest, ref.Name())
		}
		if err == nil {
			return &imageInfo{Reference: spec.Template, Digest: img.Digest, Template: true}, nil
		}
	} else {
		var digest, fetch string
		if digest, fetch, err = p.imageSource(ref, spec.Image); err == nil {
			img, err = p.ensureImage(ctx, spec.Image, digest, fetch)
		}
		if err == nil {
			img, err = p.images.store.Acquire(img.Digest, ref.Name())
		}
		if err == nil {
			if err = p.pinImage(ref, spec.Image, img.Digest); err != nil {
				p.images.store.Release(img.Digest, ref.Name())
			}
		}
		if err == nil {
			return &imageInfo{Reference: spec.Image, Digest: img.Digest}, nil
		}
	}
	obs := imageFailure(ref, spec, err)
	return nil, &obs
}

// pooledImage is the image a sandbox of spec runs when an image pool warms entries of it, resolved as
// holdImage resolves it (the digest the reference names, the one an earlier generation ran, or the one
// the store names by it now) but neither pulled nor held: the entry the sandbox takes hands its own
// hold over (claim). nil when no pool serves that digest or it cannot be resolved so; holdImage then
// finds the image, or says why it cannot.
func (p *Provider) pooledImage(ref sandbox.Ref, spec sandbox.Spec) *imageInfo {
	if len(p.imagePools) == 0 {
		return nil
	}
	info := imageInfo{Reference: spec.Image}
	var err error
	if spec.Template != "" {
		info = imageInfo{Reference: spec.Template, Template: true}
		info.Digest, err = p.templateDigest(ref, spec.Template)
	} else {
		info.Digest, _, err = p.imageSource(ref, spec.Image)
	}
	if err != nil || info.Digest == "" {
		return nil
	}
	for _, q := range p.imagePools {
		if q.serves(info.Digest) {
			return &info
		}
	}
	return nil
}

// takeEntryHold makes the pool entry e's hold on img the sandbox of ref's, in one step of the store
// (Transfer), and pins the digest a sandbox of a tag runs (pinImage; a template's is pinned as it is
// resolved). When the sandbox held img already (held, and pinned by holdImage), the entry's hold just
// goes. After an error the sandbox holds img only if it held it before.
func (p *Provider) takeEntryHold(ref sandbox.Ref, e poolEntry, img *imageInfo, held bool) error {
	if err := p.images.store.Transfer(img.Digest, e.name, ref.Name()); err != nil {
		return err
	}
	if held || img.Template {
		return nil
	}
	if err := p.pinImage(ref, img.Reference, img.Digest); err != nil {
		p.images.store.Release(img.Digest, ref.Name())
		return err
	}
	return nil
}

// imageFailure is the failed observation of ref, whose image or template cannot be had because of err.
func imageFailure(ref sandbox.Ref, spec sandbox.Spec, err error) sandbox.Observation {
	reason := reasonImagePull
	switch {
	case errors.Is(err, sandbox.ErrNotFound) && spec.Template != "":
		reason = reasonTemplateNotFound
	case errors.Is(err, sandbox.ErrNotFound):
		reason = reasonImageNotFound
	case errors.Is(err, sandbox.ErrInvalidRequest), errors.Is(err, image.ErrLayerTooLarge):
		reason = reasonImageInvalid
	}
	return sandbox.Observation{Ref: ref, State: sandbox.ObservedFailed, Reason: reason, Message: err.Error()}
}

func (p *Provider) imagePinPath(id sandbox.ID) string {
	return filepath.Join(p.cfg.StateDir, "image-pins", string(id)+".json")
}

// imageSource is what the sandbox of ref runs of the image reference ref: the digest, when it is
// known, and the reference that fetches it should the store lack it ("" when none can). A reference
// by digest names both. A tag an earlier generation of the sandbox ran names the digest that
// generation ran (its pin, image-pins/<id>.json), fetched by digest: a pull of the tag since, or a
// remove and a prune, change nothing of what the sandbox runs. Any other name is what the store
// names by it now, or, when it names nothing yet, fetched by itself.
func (p *Provider) imageSource(ref sandbox.Ref, iref string) (digest, fetch string, err error) {
	norm, byDigest, err := image.Normalize(iref)
	if err != nil {
		return "", "", err
	}
	if byDigest {
		_, d, _ := strings.Cut(norm, "@")
		return d, iref, nil
	}
	if was, ok := readPin(p.imagePinPath(ref.ID)); ok && was.Reference == iref {
		at, remote, err := image.AtDigest(iref, was.Digest)
		if err != nil || !remote {
			return was.Digest, "", err
		}
		return was.Digest, at, nil
	}
	if img, err := p.images.store.Lookup(iref); err == nil {
		return img.Digest, iref, nil
	}
	return "", iref, nil
}

// ensureImage returns the image of digest from the store, pulling fetch when the store lacks it.
// Errors: ErrNotFound when it lacks it and nothing can fetch it; the store's Pull's.
func (p *Provider) ensureImage(ctx context.Context, iref, digest, fetch string) (image.Image, error) {
	if digest != "" {
		img, err := p.images.store.Lookup(digest)
		if !errors.Is(err, sandbox.ErrNotFound) {
			return img, err
		}
		if fetch == "" {
			return img, fmt.Errorf("image %s: %s, which this sandbox ran, is no longer in the store and has no registry to be pulled from: %w",
				iref, digest, sandbox.ErrNotFound)
		}
	}
	img, err := p.images.store.Pull(ctx, fetch, nil)
	if err != nil && digest != "" && fetch != iref {
		return img, fmt.Errorf("image %s: %s, which this sandbox ran: %w", iref, digest, err)
	}
	return img, err
}

// pinImage records that the sandbox of ref ran digest of the image reference iref, a tag; once for
// each reference the sandbox runs. The pin stays as long as the state directory: a terminated
// sandbox may be recreated at any time.
func (p *Provider) pinImage(ref sandbox.Ref, iref, digest string) error {
	if _, byDigest, _ := image.Normalize(iref); byDigest {
		return nil
	}
	if was, ok := readPin(p.imagePinPath(ref.ID)); ok && was == (pin{Reference: iref, Digest: digest}) {
		return nil
	}
	return writePin(p.imagePinPath(ref.ID), pin{Reference: iref, Digest: digest})
}

// releaseImage gives up the hold of the sandbox of l on its image, if it has one.
func (p *Provider) releaseImage(l layout, m meta) error {
	p.forgetImage(l)
	if m.Image == nil || p.images == nil {
		return nil
	}
	return p.images.store.Release(m.Image.Digest, filepath.Base(l.dir))
}

func (p *Provider) forgetImage(l layout) {
	if p.images != nil {
		p.images.known.Delete(filepath.Base(l.dir))
	}
}

// imageExtensions are the providerExtensions of b's observations: its image, when it has one.
func (p *Provider) imageExtensions(b *box) map[string]json.RawMessage {
	if p.images == nil {
		return nil
	}
	name := b.ref.Name()
	v, ok := p.images.known.Load(name)
	if !ok {
		m, err := readMeta(b.l)
		if err != nil {
			return nil // not laid out (yet): asked again next time
		}
		v, _ = p.images.known.LoadOrStore(name, imageExt(m.Image))
	}
	return v.(map[string]json.RawMessage)
}

// knowImage records that the sandbox named name runs img, as its metadata now says: its observations
// report it without reading the metadata.
func (p *Provider) knowImage(name string, img *imageInfo) {
	p.images.known.Store(name, imageExt(img))
}

// imageExt is the providerExtensions of a sandbox of img; nil for none.
func imageExt(img *imageInfo) map[string]json.RawMessage {
	if img == nil {
		return nil
	}
	raw, _ := json.Marshal(imageInfo{Reference: img.Reference, Digest: img.Digest})
	key := ImageExtension
	if img.Template {
		key = TemplateExtension
	}
	return map[string]json.RawMessage{key: raw}
}

// rootfs is where the image root of a sandbox is mounted on the host until its container has started.
func (l layout) rootfs() string { return filepath.Join(l.dir, "rootfs") }

// mountImage mounts the root of the sandbox of l, m: the overlay of its image's layers, idmapped
// through the user namespace at userns, under an upper directory of its own on its disk. The host's
// mount is private: the container's copy of it lives on once the host's is detached (start).
func (p *Provider) mountImage(l layout, m meta, userns string) (image.Image, error) {
	img, err := p.images.store.Lookup(m.Image.Digest)
	if err != nil {
		return img, err
	}
	base := l.upperBase(m.Disk)
	upper, work := filepath.Join(base, "image-upper"), filepath.Join(base, "image-work")
	for _, d := range []string{upper, work, l.rootfs()} {
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			return img, err
		}
	}
	// The root directory of the sandbox is the upper's: its root's.
	if err := os.Lchown(upper, int(m.IDBase), int(m.IDBase)); err != nil {
		return img, err
	}
	ns, err := unix.Open(userns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return img, fmt.Errorf("user namespace: %w", err)
	}
	defer unix.Close(ns)
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return img, fmt.Errorf("fsopen overlay: %w", err)
	}
	defer unix.Close(fsfd)
	// "lowerdir+" stacks each layer under those before it: the top layer goes first. A detached
	// mount dissolves with its last descriptor, so each is kept open until the overlay is made.
	for _, dir := range slices.Backward(img.Layers) {
		tfd, err := addIdmappedLower(fsfd, dir, ns)
		if err != nil {
			return img, fmt.Errorf("layer %s: %w", filepath.Base(dir), err)
		}
		defer unix.Close(tfd)
	}
	// The upper and work directories go in as descriptors too, of one detached clone of the disk's
	// mount (they must share a mount): the sandbox's view of its root then names no host path.
	bfd, err := unix.OpenTree(unix.AT_FDCWD, base, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return img, fmt.Errorf("open_tree %s: %w", base, err)
	}
	defer unix.Close(bfd)
	for k, d := range map[string]string{"upperdir": filepath.Base(upper), "workdir": filepath.Base(work)} {
		fd, err := unix.Openat(bfd, d, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return img, fmt.Errorf("overlay %s: %w", k, err)
		}
		err = unix.FsconfigSetFd(fsfd, k, fd)
		unix.Close(fd)
		if err != nil {
			return img, fmt.Errorf("overlay %s: %w%s", k, err, fsLog(fsfd))
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return img, fmt.Errorf("overlay: %w%s", err, fsLog(fsfd))
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return img, fmt.Errorf("fsmount: %w", err)
	}
	defer unix.Close(mfd)
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, l.rootfs(), unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return img, fmt.Errorf("move_mount to %s: %w", l.rootfs(), err)
	}
	if err := unix.Mount("", l.rootfs(), "", unix.MS_PRIVATE, ""); err != nil {
		unmountAll(l.rootfs())
		return img, err
	}
	if err := makeWorkdir(l.rootfs(), imageWorkdir(img), m.IDBase); err != nil {
		unmountAll(l.rootfs())
		return img, fmt.Errorf("working directory: %w", err)
	}
	return img, nil
}

// addIdmappedLower adds the directory dir to the overlay being made on fsfd as its next lower layer,
// an idmapped, read-only clone of dir's mount mapped through the user namespace ns, and returns the
// clone's descriptor for the caller to close once the overlay is made.
func addIdmappedLower(fsfd int, dir string, ns int) (int, error) {
	tfd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("open_tree: %w", err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(ns)}
	if err := unix.MountSetattr(tfd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(tfd)
		return -1, fmt.Errorf("idmap: %w", err)
	}
	if err := unix.FsconfigSetFd(fsfd, "lowerdir+", tfd); err != nil {
		unix.Close(tfd)
		return -1, fmt.Errorf("lowerdir+: %w%s", err, fsLog(fsfd))
	}
	return tfd, nil
}

// fsLog is what the kernel said of the file system context fsfd, for an error message.
func fsLog(fsfd int) string {
	var msgs []string
	buf := make([]byte, 1024)
	for {
		n, err := unix.Read(fsfd, buf)
		if err != nil || n <= 0 {
			break
		}
		msgs = append(msgs, string(buf[:n]))
	}
	if len(msgs) == 0 {
		return ""
	}
	return " (" + strings.Join(msgs, "; ") + ")"
}

// unmountAll detaches every mount at dir.
func unmountAll(dir string) {
	for unix.Unmount(dir, unix.MNT_DETACH) == nil {
	}
}

// imageWorkdir is the working directory of a sandbox of img: the image's, or "/".
func imageWorkdir(img image.Image) string {
	if w := img.Config.WorkingDir; w != "" {
		return filepath.Clean("/" + w)
	}
	return "/"
}

// makeWorkdir makes the working directory dir inside the merged root, as the sandbox's root, when
// the image does not have it. The root is the image's, whose symlinks are the image's: every step
// stays inside it (os.Root).
func makeWorkdir(root, dir string, id uint32) error {
	if dir == "/" {
		return nil
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	rel := strings.TrimPrefix(dir, "/")
	if st, err := r.Stat(rel); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	parts := strings.Split(rel, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		if err := r.Mkdir(p, 0o755); err != nil {
			if os.IsExist(err) {
				continue
			}
			return err
		}
		if err := r.Lchown(p, int(id), int(id)); err != nil {
			return err
		}
	}
	return nil
}

// imageSpec makes spec, a sandbox's runtime spec on the shared root, one on its image's root, mounted
// at l.rootfs(): writable, without the host's /usr and /etc, with the agent bound in, and the image's
// Env, working directory and user (its commands'; the agent stays root). Errors: the image's user
// cannot be found in its /etc/passwd and /etc/group.
func (p *Provider) imageSpec(spec *specs.Spec, l layout, img image.Image) error {
	spec.Root = &specs.Root{Path: l.rootfs()}
	host := map[string]bool{"/usr": true, guestWorkdir: true}
	for _, b := range hostEtcBinds {
		host[b.path] = true
	}
	mounts := spec.Mounts[:0]
	for _, mnt := range spec.Mounts {
		if !host[mnt.Destination] {
			mounts = append(mounts, mnt)
		}
	}
	spec.Mounts = append(mounts, specs.Mount{Destination: guestAgent, Type: "bind", Source: filepath.Join(p.root, guestAgent),
		Options: []string{"bind", "ro", "nosuid", "nodev"}},
		// The resolver is the daemon's, as on the shared root (network.go), not whatever the image names.
		specs.Mount{Destination: "/etc/resolv.conf", Type: "bind", Source: filepath.Join(p.root, "etc", "resolv.conf"),
			Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	workdir := imageWorkdir(img)
	for i, a := range spec.Process.Args {
		if a == "-workdir" && i+1 < len(spec.Process.Args) {
			spec.Process.Args[i+1] = workdir
		}
	}
	spec.Process.Cwd = workdir
	spec.Process.Env = imageEnv(spec.Process.Env, img.Config.Env)
	if img.Config.User == "" {
		return nil
	}
	u, err := imageUser(l.rootfs(), img.Config.User)
	if err != nil {
		return fmt.Errorf("image user %q: %w", img.Config.User, err)
	}
	groups := make([]string, len(u.Sgids))
	for i, g := range u.Sgids {
		groups[i] = strconv.Itoa(g)
	}
	spec.Process.Args = append(spec.Process.Args, "-user", fmt.Sprintf("%d:%d:%s", u.Uid, u.Gid, strings.Join(groups, ",")))
	// The agent changes to the user in each command it starts, which needs these two in the sandbox's
	// user namespace; a command that is not root has none effective, and gains none (no new privileges).
	caps, ids := spec.Process.Capabilities, []string{"CAP_SETUID", "CAP_SETGID"}
	caps.Bounding = slices.Concat(caps.Bounding, ids)
	caps.Effective = slices.Concat(caps.Effective, ids)
	caps.Permitted = slices.Concat(caps.Permitted, ids)
	spec.Process.Env = imageEnv(spec.Process.Env, []string{"HOME=" + u.Home})
	return nil
}

// imageUser resolves the image's user spec ("name", "uid", "name:group", "uid:gid") against the
// /etc/passwd and /etc/group of the merged root at root, read without leaving it (the image's
// symlinks are the image's).
func imageUser(root, spec string) (*user.ExecUser, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	open := func(name string) io.Reader {
		f, err := r.Open(name)
		if err != nil {
			return nil
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, 1<<20))
		if err != nil {
			return nil
		}
		return bytes.NewReader(b)
	}
	passwd, group := open("etc/passwd"), open("etc/group")
	u, err := user.GetExecUser(spec, &user.ExecUser{Home: "/"}, passwd, group)
	if err != nil {
		return nil, err
	}
	if u.Uid < 0 || u.Uid >= IDRangeSize || u.Gid < 0 || u.Gid >= IDRangeSize {
		return nil, fmt.Errorf("uid %d or gid %d is past the sandbox's %d", u.Uid, u.Gid, IDRangeSize)
	}
	return u, nil
}

// imageEnv is base with the image's variables in place of base's of the same names.
func imageEnv(base, env []string) []string {
	out := slices.Clone(base)
	for i, kv := range out {
		if strings.HasPrefix(kv, "HOME=") {
			out[i] = "HOME=/root"
		}
	}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		i := slices.IndexFunc(out, func(b string) bool { return strings.HasPrefix(b, k+"=") })
		if i >= 0 {
			out[i] = kv
		} else {
			out = append(out, kv)
		}
	}
	return out
}
