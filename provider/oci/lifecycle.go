package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// Observation reasons.
const (
	reasonExited   = "container_exited"
	reasonMissing  = "container_missing"
	reasonProtocol = "agent_protocol" // the agent speaks another protocol version (protocol.ErrMismatch)
	// reasonCheckpoint: the checkpoint a fork starts from cannot be restored (altered on disk, or of
	// a sandbox laid out otherwise).
	reasonCheckpoint = "checkpoint_unusable"
)

// Allocate makes the container of ref, or takes one from the warm pool when ref's disk is of the default
// size, and waits, up to ReadyTimeout, for its agent to answer; it returns a ready observation, or a
// starting one when the agent is still silent. An existing generation is returned as it is.
// Errors: ErrInvalidRequest for unusable resources, ErrProviderUnavailable when the container cannot
// be made (nothing is left behind then).
func (p *Provider) Allocate(ctx context.Context, ref sandbox.Ref, spec sandbox.Spec) (sandbox.Observation, error) {
	res, err := p.resources(spec)
	if err != nil {
		return sandbox.Observation{}, err
	}
	vols, err := sandbox.VolumeMounts(spec)
	if err == nil {
		err = checkVolumePaths(vols)
	}
	if err != nil {
		return sandbox.Observation{}, err
	}
	rules, err := p.networkRules(spec)
	if err != nil {
		return sandbox.Observation{}, err
	}
	fork, err := p.forkSource(spec)
	if err != nil {
		return sandbox.Observation{}, err
	}
	b := p.box(ref)
	b.mu.Lock()
	defer b.mu.Unlock()
	defer p.donePreparing(ref) // whatever its outcome, its own: Observe reports it
	if _, err := os.Stat(b.l.meta()); err == nil {
		st, err := p.runc.state(ctx, b.container())
		if err == nil {
			if st.Status == "stopped" {
				return p.observeLocked(ctx, b)
			}
			return p.waitReady(ctx, b)
		}
		if !errors.Is(err, errNoContainer) {
			return sandbox.Observation{}, fmt.Errorf("allocate %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
		}
		// A directory without a container: an allocation that died half-way. Start again.
		if err := p.releaseLocked(ctx, b); err != nil {
			return sandbox.Observation{}, fmt.Errorf("allocate %s: clearing a partial allocation: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
		}
	}
	// The image first: a pull must not hold the volumes' lock. A create a warm pool may serve looks for
	// an entry of its image before it holds the image itself: an entry's hold becomes the sandbox's.
	var img *imageInfo
	held := false // whether the sandbox holds img in the store
	poolable := fork == nil && len(vols) == 0 && res.DiskMiB == p.cfg.DefaultDiskMiB
	if spec.Image != "" || spec.Template != "" {
		if poolable {
			img = p.pooledImage(ref, spec)
		}
		if img == nil {
			var failed *sandbox.Observation
			if img, failed = p.holdImage(ctx, ref, spec); failed != nil {
				return *failed, nil
			}
			held = true
		}
	}
	unlockVolumes := func() {}
	if len(vols) > 0 {
		// Held until the sandbox's metadata names its volumes and they are mounted: no second writer
		// can pass the check meanwhile (claimVolumes).
		p.volMu.Lock()
		var once sync.Once
		unlockVolumes = func() { once.Do(p.volMu.Unlock) }
		defer unlockVolumes()
		err := p.claimVolumes(ref, vols)
		if err != nil && held {
			p.images.store.Release(img.Digest, ref.Name()) // nothing laid out records it yet
		}
		if errors.Is(err, errVolumeInUse) {
			return sandbox.Observation{Ref: ref, State: sandbox.ObservedFailed, Reason: reasonVolumeInUse, Message: err.Error()}, nil
		} else if err != nil {
			return sandbox.Observation{}, fmt.Errorf("allocate %s: %w", ref, err)
		}
	}
	// A create, failed or not, may have taken a spare: replaced once this allocation is done.
	defer p.refillSpares()
	// A pool entry taken with its link made ahead has the sandbox's policy in effect already, or put in
	// effect while the sandbox gets ready (claim): opening tells when.
	var opening <-chan error
	pooled := false // b took a warm pool entry, whose agent claim has just heard answer
	if fork != nil {
		if err := p.createFork(ctx, b, res, *fork); err != nil {
			if cerr := p.releaseLocked(context.WithoutCancel(ctx), b); cerr != nil {
				p.log.Error("cleaning up a failed allocation", "sandbox", ref, "err", cerr)
			}
			if errors.Is(err, sandbox.ErrInvalidRequest) {
				return sandbox.Observation{Ref: ref, State: sandbox.ObservedFailed, Reason: reasonCheckpoint, Message: err.Error()}, nil
			}
			return sandbox.Observation{}, fmt.Errorf("allocate %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
		}
	} else if poolable && p.claim(ctx, b, res, img, held, rules, &opening) {
		pooled = true
		defer p.refill(img)
	} else {
		if img != nil && !held {
			// No entry after all: the image is found, pulled if need be, and held as for any create.
			var failed *sandbox.Observation
			if img, failed = p.holdImage(ctx, ref, spec); failed != nil {
				return *failed, nil
			}
		}
		if err := p.create(ctx, b, res, vols, img); err != nil {
			unlockVolumes() // the clean-up gives the volumes back
			if cerr := p.releaseLocked(context.WithoutCancel(ctx), b); cerr != nil {
				p.log.Error("cleaning up a failed allocation", "sandbox", ref, "err", cerr)
			}
			return sandbox.Observation{}, fmt.Errorf("allocate %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
		}
	}
	unlockVolumes()
	failed := func(err error) (sandbox.Observation, error) {
		if cerr := p.releaseLocked(context.WithoutCancel(ctx), b); cerr != nil {
			p.log.Error("cleaning up a failed allocation", "sandbox", ref, "err", cerr)
		}
		return sandbox.Observation{}, fmt.Errorf("allocate %s: network: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
	}
	if opening == nil {
		if err := p.attachNetwork(b, rules); err != nil {
			return failed(err)
		}
	}
	b.saw("running")
	b.gone.Store(false)
	var obs sandbox.Observation
	var werr error
	if pooled {
		// claim took the entry only once its agent answered a health check, an instant ago: asking
		// again through the new directory's socket would only add a dial and a round trip.
		obs = p.observation(b, sandbox.ObservedReady, "", "")
	} else {
		obs, werr = p.waitReady(ctx, b)
	}
	if opening != nil {
		if oerr := <-opening; oerr != nil {
			return failed(oerr)
		}
	}
	return obs, werr
}

// ValidateSpec refuses resources past the provider's bounds, before anything is recorded.
// Errors: ErrInvalidRequest.
func (p *Provider) ValidateSpec(spec sandbox.Spec) error {
	if _, err := p.resources(spec); err != nil {
		return err
	}
	if fork, err := p.forkSource(spec); err != nil {
		return err
	} else if fork != nil && (spec.Image != "" || len(spec.Extensions[sandbox.VolumesKey]) > 0) {
		return fmt.Errorf("%s: a sandbox started from a checkpoint runs on its root, without volumes: %w", CheckpointKey, sandbox.ErrInvalidRequest)
	}
	vols, err := sandbox.VolumeMounts(spec)
	if err != nil {
		return err
	}
	if err := checkVolumePaths(vols); err != nil {
		return err
	}
	if _, err = p.networkRules(spec); err != nil {
		return err
	}
	return p.checkImage(spec)
}

// resources are the limits a sandbox of spec runs with: what it asks for, the defaults for what it
// leaves out. Errors: ErrInvalidRequest for a limit below what a sandbox needs or above the maximum.
func (p *Provider) resources(spec sandbox.Spec) (sandbox.Resources, error) {
	var res sandbox.Resources
	if spec.Resources != nil {
		res = *spec.Resources
	}
	if err := checkResources(res); err != nil {
		return res, err
	}
	if res.MemoryMiB == 0 {
		res.MemoryMiB = p.cfg.DefaultMemoryMiB
	}
	if res.DiskMiB == 0 {
		res.DiskMiB = p.cfg.DefaultDiskMiB
	}
	switch {
	case res.MemoryMiB > p.cfg.MaxMemoryMiB:
		return res, fmt.Errorf("memoryMiB %d: this daemon allows at most %d: %w", res.MemoryMiB, p.cfg.MaxMemoryMiB, sandbox.ErrInvalidRequest)
	case res.DiskMiB > p.cfg.MaxDiskMiB:
		return res, fmt.Errorf("diskMiB %d: this daemon allows at most %d: %w", res.DiskMiB, p.cfg.MaxDiskMiB, sandbox.ErrInvalidRequest)
	}
	return res, nil
}

func checkResources(r sandbox.Resources) error {
	switch {
	case r.CPUMillis < 0 || r.MemoryMiB < 0 || r.DiskMiB < 0:
		return fmt.Errorf("negative resources %+v: %w", r, sandbox.ErrInvalidRequest)
	case r.MemoryMiB > 0 && r.MemoryMiB < 8:
		return fmt.Errorf("memoryMiB %d: at least 8 are needed: %w", r.MemoryMiB, sandbox.ErrInvalidRequest)
	case r.DiskMiB > 0 && r.DiskMiB < 4:
		return fmt.Errorf("diskMiB %d: at least 4 are needed: %w", r.DiskMiB, sandbox.ErrInvalidRequest)
	case r.CPUMillis > 0 && r.CPUMillis < 10:
		return fmt.Errorf("cpuMillis %d: at least 10 are needed: %w", r.CPUMillis, sandbox.ErrInvalidRequest)
	}
	return nil
}

// create lays out the sandbox directory and starts the container, on img when it is not nil.
func (p *Provider) create(ctx context.Context, b *box, res sandbox.Resources, vols []sandbox.VolumeMount, img *imageInfo) error {
	m, ns, err := p.prepare(ctx, b, res, vols, true)
	if err == nil && img != nil {
		m.Image = img
		if err = writeJSONFile(b.l.meta(), m); err != nil {
			m.Image = nil
		}
	}
	if err != nil {
		if img != nil && m.Image == nil {
			p.images.store.Release(img.Digest, b.ref.Name()) // not recorded: removeLayout would not
		}
		if ns != nil {
			ns.release()
		}
		return err
	}
	b.cid.Store(nil)
	b.settled, err = p.start(ctx, b.l, m, b.ref.Name(), ns)
	return err
}

// start writes the bundle of the container name of l for m and runs it: in a user namespace made for
// it (holdUserNS; ns, when not nil, is one being made already, which start ends in any case), the
// agent's socket bound beforehand (listenAgent). A gVisor sandbox has runsc make its user namespace,
// and its agent binds its socket itself (takeAgentSocket).
//
// It returns once the runtime has started the container. What is left to do on the host then, ending
// the holder and detaching the host's mount of the disk (1-7 ms here, most of it waiting for the
// holder to exit), is done while the agent starts, and settled closes once it is: whatever removes
// the container or moves its directory waits for it first.
func (p *Provider) start(ctx context.Context, l layout, m meta, name string, ns *pendingNS) (settled <-chan struct{}, err error) {
	defer func() {
		if err != nil && ns != nil {
			ns.release()
		}
	}()
	if p.runc.class == classGVisor {
		return closed, p.startGVisor(ctx, l, m, name)
	}
	var userns string
	if m.IDBase != 0 {
		if ns == nil {
			ns = p.holdUserNSAsync(m.IDBase)
		}
		h, err := ns.wait()
		if err != nil {
			return nil, fmt.Errorf("user namespace: %w", err)
		}
		userns = h.path()
	}
	if len(m.Volumes) > 0 {
		if userns == "" {
			return nil, fmt.Errorf("volumes need the sandbox's own user namespace")
		}
		if err := p.mountVolumes(l, m, userns); err != nil {
			return nil, err
		}
	}
	if m.Image != nil {
		if _, err := p.mountImage(l, m, userns); err != nil {
			return nil, fmt.Errorf("image root: %w", err)
		}
	}
	if err := p.writeBundle(l, m, userns); err != nil {
		return nil, err
	}
	ln, err := listenAgent(l)
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	defer ln.Close() // the container holds its own copy
	filter, err := seccompFile()
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	defer filter.Close()
	if err := p.runc.run(ctx, l, name, ln, filter); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if ns != nil {
			ns.release() // the container's processes hold the namespace once runc has returned
		}
		// Like the disk's below: the container holds its own mounts of its volumes.
		if err := unmountVolumeClones(l); err != nil {
			p.log.Warn("unmounting a started sandbox's volumes on the host", "dir", l.dir, "err", err)
		}
		if m.Image != nil {
			unmountAll(l.rootfs()) // as the disk's, below: the container holds its own
		}
		if m.Disk {
			// The container holds a mount of its disk of its own. Left mounted on the host too, each
			// disk would be one more line of the host's mount table, which every runtime call reads
			// through: 1000 of them cost each `runc run` ≈14 ms. The loop device frees itself once
			// the container's mount is gone. Should this fail, the disk stays mounted on the host
			// until the sandbox is removed (removeDisk), which costs the host, not the sandbox.
			if err := unix.Unmount(l.diskDir(), unix.MNT_DETACH); err != nil {
				p.log.Warn("unmounting a started sandbox's disk on the host", "dir", l.diskDir(), "err", err)
			}
		}
	}()
	return done, nil
}

// closed is a settled channel with nothing to wait for.
var closed = func() <-chan struct{} { c := make(chan struct{}); close(c); return c }()

func (p *Provider) startGVisor(ctx context.Context, l layout, m meta, name string) error {
	if err := p.writeBundle(l, m, ""); err != nil {
		return err
	}
	if err := p.runc.run(ctx, l, name); err != nil {
		return err
	}
	return p.adoptGVisor(ctx, l, m, name)
}

// adoptGVisor does what follows runsc's start of the container name: its processes that become ours are
// reaped, and the agent's socket is taken (takeAgentSocket).
func (p *Provider) adoptGVisor(ctx context.Context, l layout, m meta, name string) error {
	children.watch(p.runc.id(name), m.CgroupPath)
	tctx, cancel := context.WithTimeout(ctx, p.cfg.ReadyTimeout)
	defer cancel()
	if err := takeAgentSocket(tctx, l, m.IDBase); err != nil {
		return fmt.Errorf("agent socket: %w", err)
	}
	return nil
}

// writeBundle writes the runtime spec of m into l, the sandbox joining the user namespace at userns, or
// making its own when that is empty.
func (p *Provider) writeBundle(l layout, m meta, userns string) error {
	spec, err := p.containerSpec(l, m, userns)
	if err != nil {
		return err
	}
	if m.Image != nil {
		img, err := p.images.store.Lookup(m.Image.Digest)
		if err != nil {
			return err
		}
		if err := p.imageSpec(spec, l, img); err != nil {
			return err
		}
	}
	return writeJSONFile(filepath.Join(l.dir, "config.json"), spec)
}

// prepare lays out the sandbox directory without starting anything, and returns its metadata (and,
// with hold, its user namespace's holder being made, and the directory taken from a spare when one
// fits: lay).
func (p *Provider) prepare(ctx context.Context, b *box, res sandbox.Resources, vols []sandbox.VolumeMount, hold bool) (meta, *pendingNS, error) {
	m := meta{Ref: b.ref, Resources: res, Disk: res.DiskMiB > 0, CgroupPath: p.cgroupPath(b.ref.Name()), Volumes: vols}
	if hold {
		return p.lay(ctx, b.l, m)
	}
	return p.layOut(ctx, b.l, m, false)
}

// lay is layOut with hold, from an idle spare when m's disk is of the default size (takeSpare).
func (p *Provider) lay(ctx context.Context, l layout, m meta) (meta, *pendingNS, error) {
	if m, ns, ok := p.takeSpare(l, m); ok {
		return m, ns, nil
	}
	return p.layOut(ctx, l, m, true)
}

// cgroupPath is the cgroup of the container name.
func (p *Provider) cgroupPath(name string) string { return "/sandboxd-" + p.cgTag + "-" + name }

// layOut makes the directory l for m, with a uid range of its own, and returns m with that range. The
// metadata is written first, so that Resources and Release find even an allocation that fails half-way
// (and give its range back). With hold, the holder of the range's user namespace is made meanwhile
// (≈2 ms, mostly a fork and exec, beside the disk's ≈4 ms) and returned for start; on runc only.
func (p *Provider) layOut(ctx context.Context, l layout, m meta, hold bool) (_ meta, ns *pendingNS, err error) {
	defer func() {
		if err != nil && ns != nil {
			ns.release()
			ns = nil
		}
	}()
	first, err := p.ids.take()
	if err != nil {
		return m, nil, err
	}
	// The directory is searchable, not readable, by others: the sandbox's init, an unprivileged host uid,
	// may have to reach into it from inside its user namespace. What it holds is the provider's alone.
	if err := os.Mkdir(l.dir, 0o711); err != nil {
		p.ids.give(first)
		return m, nil, err
	}
	m.IDBase = first
	if err := writeJSONFile(l.meta(), m); err != nil {
		p.ids.give(first)
		return m, nil, err
	}
	if err := os.Mkdir(l.runDir(), 0o700); err != nil {
		return m, nil, err
	}
	if hold && p.runc.class == classRunc {
		ns = p.holdUserNSAsync(first) // beside the disk's making
	}
	if m.Disk {
		if err := p.disks.makeDisk(ctx, l.diskImg(), l.diskDir(), m.Resources.DiskMiB); err != nil {
			return m, ns, fmt.Errorf("disk: %w", err)
		}
	} else if err := os.Mkdir(l.upperBase(false), 0o711); err != nil {
		return m, ns, err
	}
	if p.runc.class == classGVisor {
		// Where the gofer, the sandbox's root on the host, binds the agent's socket.
		if err := os.Mkdir(l.sockDir(), 0o700); err != nil {
			return m, ns, err
		}
		if err := os.Lchown(l.sockDir(), int(first), int(first)); err != nil {
			return m, ns, err
		}
	}
	// /workspace belongs to the sandbox's root.
	upper := filepath.Join(l.upperBase(m.Disk), "upper")
	if err := os.Mkdir(upper, 0o755); err != nil {
		return m, ns, err
	}
	if err := os.Lchown(upper, int(first), int(first)); err != nil {
		return m, ns, err
	}
	return m, ns, nil
}

// waitReady polls the agent's health until it answers, ctx ends or ReadyTimeout passes.
func (p *Provider) waitReady(ctx context.Context, b *box) (sandbox.Observation, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ReadyTimeout)
	defer cancel()
	// The agent's socket is bound before the container starts, so the first health check waits in its
	// backlog until the agent serves. Should it fail anyway (an agent that died), retry in a tight
	// loop, and back off only once it is clearly slow.
	start := time.Now()
	for {
		delay := 200 * time.Microsecond
		if time.Since(start) > time.Second {
			delay = 20 * time.Millisecond
		}
		hctx, hcancel := context.WithTimeout(ctx, time.Second)
		_, err := b.client.Health(hctx)
		hcancel()
		if err == nil {
			return p.observation(b, sandbox.ObservedReady, "", ""), nil
		}
		if errors.Is(err, protocol.ErrMismatch) {
			return p.observation(b, sandbox.ObservedFailed, reasonProtocol, err.Error()), nil // no retry mends it
		}
		select {
		case <-ctx.Done():
			return p.observeLocked(context.WithoutCancel(ctx), b)
		case <-time.After(delay):
		}
	}
}

// quickHealth bounds the health check Observe tries before it asks the runtime: an agent that takes
// longer (a sandbox held to a small CPU quota by a busy command) is looked at the slow way.
const quickHealth = 250 * time.Millisecond

// Observe reports on ref: absent when the provider holds nothing for it, paused, ready when the agent
// answers, starting when it does not yet, failed when the container is gone or has exited.
func (p *Provider) Observe(ctx context.Context, ref sandbox.Ref) (sandbox.Observation, error) {
	b := p.box(ref)
	b.mu.Lock()
	defer b.mu.Unlock()
	return p.observeLocked(ctx, b)
}

func (p *Provider) observeLocked(ctx context.Context, b *box) (sandbox.Observation, error) {
	// A container known to run unpaused answers through its agent in a fraction of a millisecond, while
	// `runc state` starts a process (≈10 ms of CPU). Ask the agent first, and look at the container
	// only when it does not answer at once or may be paused: a reconcile pass over 1000 idle sandboxes
	// is then 1000 round trips on kept-alive connections, not 1000 runtime processes.
	if b.known.Load() && !b.paused.Load() && !b.gone.Load() {
		hctx, cancel := context.WithTimeout(ctx, quickHealth)
		_, err := b.client.Health(hctx)
		cancel()
		if err == nil {
			return p.observation(b, sandbox.ObservedReady, "", ""), nil
		}
	}
	_, statErr := os.Stat(b.l.dir)
	st, err := p.runc.state(ctx, b.container())
	if errors.Is(err, errNoContainer) {
		if os.IsNotExist(statErr) {
			if p.isPreparing(b.ref) {
				return p.observation(b, sandbox.ObservedStarting, sandbox.ReasonPreparing, "its image is being pulled"), nil
			}
			p.forget(b)
			return p.observation(b, sandbox.ObservedAbsent, "", ""), nil
		}
		return p.observation(b, sandbox.ObservedFailed, reasonMissing, "the sandbox directory has no container"), nil
	}
	if err != nil {
		return sandbox.Observation{}, fmt.Errorf("observe %s: %v: %w", b.ref, err, sandbox.ErrProviderUnavailable)
	}
	if isSuspended(b.l) {
		// Stopped at a checkpoint until Resume restores it, whatever runsc says while its sandbox
		// winds down.
		b.saw("paused")
		return p.observation(b, sandbox.ObservedPaused, "", "stopped at a checkpoint"), nil
	}
	b.saw(st.Status)
	switch st.Status {
	case "paused":
		return p.observation(b, sandbox.ObservedPaused, "", ""), nil
	case "stopped":
		return p.observation(b, sandbox.ObservedFailed, reasonExited, "the container's agent has exited"), nil
	case "running":
		hctx, cancel := context.WithTimeout(ctx, min(p.cfg.CallTimeout, 2*time.Second))
		_, herr := b.client.Health(hctx)
		cancel()
		if herr == nil {
			return p.observation(b, sandbox.ObservedReady, "", ""), nil
		}
		return p.observation(b, sandbox.ObservedStarting, "", herr.Error()), nil
	}
	return p.observation(b, sandbox.ObservedStarting, "", "container "+st.Status), nil
}

func (p *Provider) observation(b *box, state sandbox.ObservedState, reason, msg string) sandbox.Observation {
	return sandbox.Observation{Ref: b.ref, State: state, Reason: reason, Message: msg, Extensions: p.imageExtensions(b)}
}

// Release stops the container (SIGTERM, then SIGKILL after StopGrace), deletes it, unmounts its disk,
// frees the loop device, removes its cgroups and its directory. Releasing an absent ref succeeds.
// Errors: ErrProviderUnavailable when something could not be removed (a retry continues the work).
func (p *Provider) Release(ctx context.Context, ref sandbox.Ref) error {
	b := p.box(ref)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := p.releaseLocked(ctx, b); err != nil {
		return fmt.Errorf("release %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
	}
	return nil
}

func (p *Provider) releaseLocked(ctx context.Context, b *box) error {
	b.gone.Store(true)
	if b.settled != nil {
		<-b.settled
		b.settled = nil
	}
	if err := p.remove(ctx, b.l, b.container()); err != nil {
		return err
	}
	p.donePreparing(b.ref)
	p.forget(b)
	return nil
}

// remove stops and deletes the container name, unmounts the disk, frees the loop device, and removes
// the cgroups and the directory l: of a sandbox, or of a pool entry.
func (p *Provider) remove(ctx context.Context, l layout, name string) error {
	if err := p.removeContainer(ctx, name); err != nil {
		return err
	}
	if err := p.detachNetwork(l); err != nil {
		return err
	}
	m, merr := readMetaFile(l)
	if merr == nil {
		if err := removeCgroups(m.CgroupPath); err != nil {
			return err
		}
	} else if !os.IsNotExist(merr) {
		p.log.Warn("sandbox metadata unreadable; its cgroups may stay", "dir", l.dir, "err", merr)
	}
	return p.removeLayout(ctx, l, m, merr == nil)
}

// removeLayout removes what layOut made in l: the disk (unmounted, its loop device freed) and the
// directory; with known, m is l's metadata and its uid range is given back.
func (p *Provider) removeLayout(ctx context.Context, l layout, m meta, known bool) error {
	// Never remove the directory through a volume's mount: whatever the metadata says, every clone
	// under it is off the host first.
	if err := unmountVolumeClones(l); err != nil {
		return err
	}
	unmountAll(l.rootfs())
	if err := removeDisk(ctx, l.diskImg(), l.diskDir()); err != nil {
		return err
	}
	if mounted(l.diskDir()) {
		return fmt.Errorf("%s is still mounted", l.diskDir())
	}
	if err := os.RemoveAll(l.dir); err != nil {
		return err
	}
	if known {
		p.ids.give(m.IDBase)
		if err := p.releaseImage(l, m); err != nil {
			return err
		}
	}
	return nil
}

// removeContainer stops and deletes the container name, if there is one, and reaps the runtime's
// processes this provider started for it (before the delete: runsc waits for its gofer to be gone).
func (p *Provider) removeContainer(ctx context.Context, name string) error {
	st, err := p.runc.state(ctx, name)
	switch {
	case errors.Is(err, errNoContainer):
		return children.reap(ctx, p.runc.id(name))
	case err != nil:
		return err
	}
	if err := p.stop(ctx, name, st); err != nil {
		return err
	}
	if err := children.reap(ctx, p.runc.id(name)); err != nil {
		return err
	}
	if _, err := p.runc.simple(ctx, "delete", name); err != nil && !errors.Is(err, errNoContainer) {
		if _, err := p.runc.simple(ctx, "delete", "--force", name); err != nil && !errors.Is(err, errNoContainer) {
			return err
		}
	}
	return nil
}

// stop ends the init of container name: SIGTERM lets the agent stop its commands, SIGKILL follows
// after StopGrace. A paused container is thawed first, or it could not act on either signal.
func (p *Provider) stop(ctx context.Context, name string, st containerState) error {
	if st.Status == "stopped" {
		if st.Pid > 0 {
			return waitExit(ctx, st.Pid) // reap it if it is our child
		}
		return nil
	}
	if st.Status == "paused" {
		if _, err := p.runc.simple(ctx, "resume", name); err != nil && !errors.Is(err, errNoContainer) {
			return err
		}
	}
	if st.Pid <= 0 {
		return nil
	}
	if _, err := p.runc.simple(ctx, "kill", name, "TERM"); err == nil {
		gctx, cancel := context.WithTimeout(ctx, p.cfg.StopGrace)
		err = waitExit(gctx, st.Pid)
		cancel()
		if err == nil {
			return nil
		}
	}
	if _, err := p.runc.simple(ctx, "kill", name, "KILL"); err != nil && !errors.Is(err, errNoContainer) {
		if alive(st.Pid) {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return waitExit(wctx, st.Pid)
}

// Pause freezes every process of the sandbox. Commands in flight finish after Resume.
// Errors: ErrNotFound when the provider holds nothing for ref, ErrProviderUnavailable.
func (p *Provider) Pause(ctx context.Context, ref sandbox.Ref) error {
	return p.freeze(ctx, ref, "pause", "paused")
}

// Resume thaws the sandbox. Errors: as Pause.
func (p *Provider) Resume(ctx context.Context, ref sandbox.Ref) error {
	return p.freeze(ctx, ref, "resume", "running")
}

func (p *Provider) freeze(ctx context.Context, ref sandbox.Ref, verb, want string) error {
	b := p.box(ref)
	b.mu.Lock()
	defer b.mu.Unlock()
	if verb == "resume" {
		if ok, err := p.resumeSuspended(ctx, b); ok {
			if err != nil {
				return fmt.Errorf("resume %s from its checkpoint: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
			}
			return nil
		}
	}
	st, err := p.runc.state(ctx, b.container())
	if errors.Is(err, errNoContainer) {
		return fmt.Errorf("%s %s: %w", verb, ref, sandbox.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %v: %w", verb, ref, err, sandbox.ErrProviderUnavailable)
	}
	if st.Status != want {
		if st.Status == "stopped" || st.Status == "created" {
			return fmt.Errorf("%s %s: container is %s: %w", verb, ref, st.Status, sandbox.ErrInvalidState)
		}
		if _, err := p.runc.simple(ctx, verb, b.container()); err != nil {
			return fmt.Errorf("%s %s: %v: %w", verb, ref, err, sandbox.ErrProviderUnavailable)
		}
	}
	b.saw(want)
	return nil
}
