package oci

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
)

// A checkpoint of a gVisor sandbox is its kernel's memory and process state, written by `runsc
// checkpoint`, and a copy of its /workspace, in a directory of its own under the state directory:
// checkpoints/<sandbox id>/<checkpoint id>, made under a temporary name and renamed once complete, with
// the digest of every file in checkpoint.json. It outlives the generation it was taken of: Resume
// restores a sandbox a checkpoint stopped (`runsc restore`, which needs nothing of the runsc processes
// that wrote it, so a restarted provider restores it too), and a sandbox whose spec names one
// (sandboxd.checkpoint) starts from it, a fork with its own directory, disk and agent socket.
//
// gVisor saves no socket bound on the host, and the agent's is one (runtime.go): before runsc writes
// the checkpoint, the agent lets go of its socket (protocol.PathSuspend), and binds another, named in
// the checkpoint, when runsc delivers it SIGUSR2 after the restore (or after a checkpoint that leaves
// the sandbox running). The agent knows nothing of its sandbox's id: a fork's agent is the same
// program in a sandbox of another name, and its table of processes is the one of the moment of the
// checkpoint.

// suspendSettle is how long a checkpoint waits after the agent's answer to a suspend before runsc
// saves the sandbox.
const suspendSettle = 200 * time.Millisecond

// CheckpointKey is the spec.extensions key that starts a sandbox from a checkpoint.
const CheckpointKey = "sandboxd.checkpoint"

// checkpointRecord is checkpoint.json.
type checkpointRecord struct {
	ID         string            `json:"id"`
	Of         sandbox.Ref       `json:"of"`
	CreatedAt  time.Time         `json:"createdAt"`
	Running    bool              `json:"leftRunning"`
	Socket     string            `json:"socket"` // the agent binds it when woken
	Disk       bool              `json:"disk"`
	MemoryMiB  int64             `json:"memoryMiB"`
	ImageBytes int64             `json:"imageBytes"`
	Digests    map[string]string `json:"digests"` // file of image/ -> sha256
	Sockets    []string          `json:"sockets"` // the names in the sandbox's socket directory
	// IDBase and Lineage are the sandbox's uid range and whose it is: gVisor restores a kernel only
	// under the user namespace mappings it was saved with, so a fork shares the range.
	IDBase  uint32     `json:"idBase"`
	Lineage sandbox.ID `json:"lineage"`
}

// suspendedFile, in a sandbox's directory, names the checkpoint a checkpoint without leaveRunning
// stopped it at: the sandbox is paused until Resume restores it.
func (l layout) suspendedFile() string { return filepath.Join(l.dir, "suspended.json") }

type suspended struct {
	SandboxID  sandbox.ID `json:"sandboxId"`
	Checkpoint string     `json:"checkpoint"`
}

func (p *Provider) checkpointDir(id sandbox.ID, ckpt string) string {
	return filepath.Join(p.cfg.StateDir, "checkpoints", string(id), ckpt)
}

// validCheckpointName: what the provider makes ("ckpt_" and hex), so a name from a request never
// becomes a path of anything else.
func validCheckpointName(s string) bool {
	rest, ok := strings.CutPrefix(s, "ckpt_")
	if !ok || len(rest) != 16 {
		return false
	}
	_, err := hex.DecodeString(rest)
	return err == nil
}

func validSandboxID(id sandbox.ID) bool {
	s := string(id)
	return s != "" && len(s) <= 64 && !strings.ContainsAny(s, "/\\.\x00 ")
}

// Checkpoint writes the memory and process state of the ready gVisor sandbox ref, and a copy of its
// /workspace, to a new checkpoint. Without leaveRunning the sandbox stops at it and observes paused;
// Resume restores it. Errors: ErrUnsupportedCapability on runc, ErrNotFound, ErrInvalidState when it
// is not running, ErrProviderProtocol from an agent that cannot suspend, ErrProviderUnavailable.
func (p *Provider) Checkpoint(ctx context.Context, ref sandbox.Ref, leaveRunning bool) (sandbox.Checkpoint, error) {
	if p.runc.class != classGVisor {
		return sandbox.Checkpoint{}, fmt.Errorf("checkpoint %s: runc sandboxes have no memory snapshots: %w", ref, sandbox.ErrUnsupportedCapability)
	}
	b := p.box(ref)
	b.mu.Lock()
	defer b.mu.Unlock()
	m, err := readMetaFile(b.l)
	if errors.Is(err, os.ErrNotExist) {
		return sandbox.Checkpoint{}, fmt.Errorf("checkpoint %s: %w", ref, sandbox.ErrNotFound)
	}
	if err != nil {
		return sandbox.Checkpoint{}, fmt.Errorf("checkpoint %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
	}
	st, err := p.runc.state(ctx, b.container())
	if err != nil || st.Status != "running" {
		return sandbox.Checkpoint{}, fmt.Errorf("checkpoint %s: the container is %s (%v): %w", ref, cmpStatus(st.Status), err, sandbox.ErrInvalidState)
	}
	rec := checkpointRecord{ID: "ckpt_" + randomHex(8), Of: ref, CreatedAt: time.Now().UTC(), Running: leaveRunning,
		Socket: "agent-" + randomHex(8) + ".sock", Disk: m.Disk, MemoryMiB: m.Resources.MemoryMiB,
		IDBase: m.IDBase, Lineage: cmp.Or(m.Lineage, ref.ID)}
	final := p.checkpointDir(ref.ID, rec.ID)
	tmp := filepath.Join(filepath.Dir(final), ".tmp-"+rec.ID)
	if err := os.MkdirAll(filepath.Join(tmp, "image"), 0o700); err != nil {
		return sandbox.Checkpoint{}, fmt.Errorf("checkpoint %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
	}
	fail := func(err error) (sandbox.Checkpoint, error) {
		os.RemoveAll(tmp)
		return sandbox.Checkpoint{}, fmt.Errorf("checkpoint %s: %w", ref, err)
	}
	if rec.Sockets, err = sockets(b.l); err != nil {
		return fail(fmt.Errorf("%v: %w", err, sandbox.ErrProviderUnavailable))
	}
	if err := b.client.Suspend(ctx, rec.Socket); err != nil {
		return fail(err)
	}
	// Nothing on the host tells when the agent has closed its socket: the gofer keeps the host's end
	// bound, so a dial still succeeds. The agent closes it 20 ms after its answer.
	time.Sleep(suspendSettle)
	args := []string{"checkpoint", "--image-path", filepath.Join(tmp, "image")}
	if leaveRunning {
		args = append(args, "--leave-running")
	}
	_, cerr := p.runc.simple(ctx, append(args, b.container())...)
	if cerr == nil && !leaveRunning {
		// Stopped at the checkpoint: the agent binds again after the restore.
	} else if after, err := p.runc.state(ctx, b.container()); err == nil && after.Status == "running" {
		// Left running, or still running after a checkpoint that failed: the agent binds again.
		if err := p.wake(ctx, b, m, rec.Socket); err != nil {
			return fail(fmt.Errorf("waking the agent: %v: %w", err, sandbox.ErrProviderUnavailable))
		}
	} else if cerr != nil {
		b.saw("stopped")
	}
	if cerr != nil {
		return fail(fmt.Errorf("%v: %w", cerr, sandbox.ErrProviderUnavailable))
	}
	if err := copyTree(filepath.Join(b.l.upperBase(m.Disk), "upper"), filepath.Join(tmp, "workspace")); err != nil {
		return fail(fmt.Errorf("copying /workspace: %v: %w", err, sandbox.ErrProviderUnavailable))
	}
	if rec.Digests, rec.ImageBytes, err = digestDir(filepath.Join(tmp, "image")); err != nil {
		return fail(fmt.Errorf("%v: %w", err, sandbox.ErrProviderUnavailable))
	}
	if err := writeJSONFile(filepath.Join(tmp, "checkpoint.json"), rec); err != nil {
		return fail(fmt.Errorf("%v: %w", err, sandbox.ErrProviderUnavailable))
	}
	if err := os.Rename(tmp, final); err != nil {
		return fail(fmt.Errorf("%v: %w", err, sandbox.ErrProviderUnavailable))
	}
	if !leaveRunning {
		if err := writeJSONFile(b.l.suspendedFile(), suspended{SandboxID: ref.ID, Checkpoint: rec.ID}); err != nil {
			return sandbox.Checkpoint{}, fmt.Errorf("checkpoint %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
		}
		b.saw("paused")
	}
	return rec.info(), nil
}

func (r checkpointRecord) info() sandbox.Checkpoint {
	return sandbox.Checkpoint{ID: r.ID, SandboxID: r.Of.ID, Generation: r.Of.Generation, CreatedAt: r.CreatedAt,
		LeftRunning: r.Running, SizeBytes: r.ImageBytes}
}

func cmpStatus(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// Checkpoints lists the checkpoints taken of sandbox id, oldest first.
func (p *Provider) Checkpoints(_ context.Context, id sandbox.ID) ([]sandbox.Checkpoint, error) {
	if !validSandboxID(id) {
		return nil, fmt.Errorf("sandbox id %q: %w", id, sandbox.ErrInvalidRequest)
	}
	entries, err := os.ReadDir(filepath.Join(p.cfg.StateDir, "checkpoints", string(id)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoints of %s: %v: %w", id, err, sandbox.ErrProviderUnavailable)
	}
	var out []sandbox.Checkpoint
	for _, e := range entries {
		if !validCheckpointName(e.Name()) {
			continue
		}
		if rec, err := p.readCheckpoint(id, e.Name()); err == nil {
			out = append(out, rec.info())
		}
	}
	slices.SortFunc(out, func(a, b sandbox.Checkpoint) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// readCheckpoint reads checkpoint ckpt of sandbox id. Errors: ErrNotFound when there is none,
// ErrInvalidRequest for a name the provider never makes.
func (p *Provider) readCheckpoint(id sandbox.ID, ckpt string) (checkpointRecord, error) {
	if !validSandboxID(id) || !validCheckpointName(ckpt) {
		return checkpointRecord{}, fmt.Errorf("checkpoint %q of sandbox %q: no such name: %w", ckpt, id, sandbox.ErrInvalidRequest)
	}
	raw, err := os.ReadFile(filepath.Join(p.checkpointDir(id, ckpt), "checkpoint.json"))
	if errors.Is(err, os.ErrNotExist) {
		return checkpointRecord{}, fmt.Errorf("checkpoint %s of sandbox %s: %w", ckpt, id, sandbox.ErrNotFound)
	}
	if err != nil {
		return checkpointRecord{}, fmt.Errorf("checkpoint %s of sandbox %s: %v: %w", ckpt, id, err, sandbox.ErrProviderUnavailable)
	}
	var rec checkpointRecord
	if err := json.Unmarshal(raw, &rec); err != nil || rec.ID != ckpt || rec.Of.ID != id || !strings.HasPrefix(rec.Socket, "agent-") || strings.ContainsAny(rec.Socket, "/\x00") {
		return checkpointRecord{}, fmt.Errorf("checkpoint %s of sandbox %s: its record is damaged: %w", ckpt, id, sandbox.ErrInvalidRequest)
	}
	return rec, nil
}

// verify checks the files of rec's image against their digests: a checkpoint altered on disk is
// refused before runsc reads it.
func (p *Provider) verify(rec checkpointRecord) error {
	got, _, err := digestDir(filepath.Join(p.checkpointDir(rec.Of.ID, rec.ID), "image"))
	if err != nil {
		return fmt.Errorf("checkpoint %s: %v: %w", rec.ID, err, sandbox.ErrInvalidRequest)
	}
	if len(got) != len(rec.Digests) {
		return fmt.Errorf("checkpoint %s: its files changed since it was written: %w", rec.ID, sandbox.ErrInvalidRequest)
	}
	for name, d := range rec.Digests {
		if got[name] != d {
			return fmt.Errorf("checkpoint %s: %s changed since it was written: %w", rec.ID, name, sandbox.ErrInvalidRequest)
		}
	}
	return nil
}

// restore starts the container of b from checkpoint rec, in b's directory as it is laid out, and waits
// for its agent's socket. The container's stopped predecessor, if any, is deleted first.
func (p *Provider) restore(ctx context.Context, b *box, m meta, rec checkpointRecord) error {
	if err := p.verify(rec); err != nil {
		return err
	}
	if err := p.removeContainer(ctx, b.container()); err != nil {
		return err
	}
	if err := p.openSockDir(b.l, m); err != nil {
		return err
	}
	out, err := os.OpenFile(b.l.agentLog(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	c := p.runc.cmd(ctx, b.l.runcLog(), "restore", "--detach", "--pid-file", b.l.pidFile(),
		"--image-path", filepath.Join(p.checkpointDir(rec.Of.ID, rec.ID), "image"), "--bundle", b.l.dir, b.container())
	c.Stdout, c.Stderr = out, out
	if err := c.Run(); err != nil {
		return fmt.Errorf("runsc restore %s: %v: %s", b.container(), err, lastLogError(b.l.runcLog()))
	}
	children.watch(p.runc.id(b.container()), m.CgroupPath)
	return p.wake(ctx, b, m, rec.Socket)
}

// openSockDir gives the socket directory back to the sandbox's root, so that its agent can bind in it
// again (takeAgentSocketAs takes it back). The sockets it bound before stay: gVisor's restore finds
// again every file its kernel had looked up.
func (p *Provider) openSockDir(l layout, m meta) error {
	if err := os.Remove(l.socket()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.Lchown(l.sockDir(), int(m.IDBase), int(m.IDBase))
}

// sockets are the names in l's socket directory.
func sockets(l layout) ([]string, error) {
	entries, err := os.ReadDir(l.sockDir())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out, nil
}

// makeSockets makes, in a fork's socket directory, the socket files its checkpoint's sandbox had:
// bound and closed at once, nothing listens on them. They are bound through /proc/self/fd of the
// directory, whose path may be too long for sockaddr_un (a deep data directory), as inRunDir dials.
func makeSockets(l layout, names []string) error {
	dir, err := unix.Open(l.sockDir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	for _, name := range names {
		if !strings.HasPrefix(name, "agent") || strings.ContainsAny(name, "/\x00") || len(name) > 64 {
			return fmt.Errorf("socket name %q: %w", name, sandbox.ErrInvalidRequest)
		}
		ln, err := net.Listen("unix", "/proc/self/fd/"+strconv.Itoa(dir)+"/"+name)
		if err != nil {
			return err
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close()
		if err := unix.Fchmodat(dir, name, 0o600, 0); err != nil {
			return fmt.Errorf("chmod socket %s: %w", name, err)
		}
	}
	return nil
}

// wake has the suspended agent of b bind socket (SIGUSR2 through the runtime) and takes it.
func (p *Provider) wake(ctx context.Context, b *box, m meta, socket string) error {
	if err := p.openSockDir(b.l, m); err != nil {
		return err
	}
	if _, err := p.runc.simple(ctx, "kill", b.container(), "USR2"); err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, p.cfg.ReadyTimeout)
	defer cancel()
	b.client.Close()
	return takeAgentSocketAs(tctx, b.l, m.IDBase, socket)
}

// resumeSuspended restores b when a checkpoint stopped it; false when none did.
func (p *Provider) resumeSuspended(ctx context.Context, b *box) (bool, error) {
	raw, err := os.ReadFile(b.l.suspendedFile())
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return true, err
	}
	var s suspended
	if err := json.Unmarshal(raw, &s); err != nil {
		return true, fmt.Errorf("%s: %v", b.l.suspendedFile(), err)
	}
	rec, err := p.readCheckpoint(s.SandboxID, s.Checkpoint)
	if err != nil {
		return true, err
	}
	m, err := readMetaFile(b.l)
	if err != nil {
		return true, err
	}
	if err := p.restore(ctx, b, m, rec); err != nil {
		return true, err
	}
	if err := os.Remove(b.l.suspendedFile()); err != nil {
		return true, err
	}
	b.saw("running")
	return true, nil
}

// isSuspended reports whether a checkpoint stopped b.
func isSuspended(l layout) bool { return fileExists(l.suspendedFile()) }

// forkSource is the checkpoint a spec starts from (sandboxd.checkpoint), nil when it names none.
// Errors: ErrInvalidRequest for a malformed value or a checkpoint that does not exist,
// ErrUnsupportedCapability on runc.
func (p *Provider) forkSource(spec sandbox.Spec) (*checkpointRecord, error) {
	raw, ok := spec.Extensions[CheckpointKey]
	if !ok {
		return nil, nil
	}
	var v struct {
		SandboxID  sandbox.ID `json:"sandboxId"`
		Checkpoint string     `json:"checkpoint"`
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%s: %v: %w", CheckpointKey, err, sandbox.ErrInvalidRequest)
	}
	if p.runc.class != classGVisor {
		return nil, fmt.Errorf("%s: runc sandboxes have no memory snapshots: %w", CheckpointKey, sandbox.ErrUnsupportedCapability)
	}
	rec, err := p.readCheckpoint(v.SandboxID, v.Checkpoint)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, fmt.Errorf("%s: %v: %w", CheckpointKey, err, sandbox.ErrInvalidRequest)
	} else if err != nil {
		return nil, fmt.Errorf("%s: %w", CheckpointKey, err)
	}
	return &rec, nil
}

// startFork lays the checkpoint's /workspace into b's and restores the checkpoint in b's container.
func (p *Provider) startFork(ctx context.Context, b *box, m meta, rec checkpointRecord) error {
	if rec.Disk != m.Disk {
		return fmt.Errorf("checkpoint %s was taken of a sandbox with%s a disk: %w", rec.ID, map[bool]string{false: "out", true: ""}[rec.Disk], sandbox.ErrInvalidRequest)
	}
	upper := filepath.Join(b.l.upperBase(m.Disk), "upper")
	if err := copyTree(filepath.Join(p.checkpointDir(rec.Of.ID, rec.ID), "workspace"), upper); err != nil {
		return fmt.Errorf("the checkpoint's /workspace: %w", err)
	}
	if err := makeSockets(b.l, rec.Sockets); err != nil {
		return err
	}
	if err := p.writeBundle(b.l, m, ""); err != nil {
		return err
	}
	return p.restore(ctx, b, m, rec)
}

// copyTree copies the directory src to dst (made when missing, its content replaced) with owners,
// modes and times, never following a symlink.
func copyTree(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	out, err := exec.Command("cp", "-a", "--no-dereference", "--reflink=auto", src+"/.", dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("cp: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// digestDir is the sha256 of each regular file of dir and their total size.
func digestDir(dir string) (map[string]string, int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, err
	}
	out := map[string]string{}
	var total int64
	for _, e := range entries {
		if !e.Type().IsRegular() {
			return nil, 0, fmt.Errorf("%s is not a regular file", e.Name())
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, 0, err
		}
		h := sha256.New()
		n, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, 0, err
		}
		total += n
		out[e.Name()] = hex.EncodeToString(h.Sum(nil))
	}
	return out, total, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// createFork lays out b's directory as create does and starts its container from rec.
func (p *Provider) createFork(ctx context.Context, b *box, res sandbox.Resources, rec checkpointRecord) error {
	m, _, err := p.prepare(ctx, b, res, nil, false)
	if err != nil {
		return err
	}
	// The range layOut took goes back; the fork takes its lineage's, which no other sandbox may hold.
	if err := p.shareRange(rec); err != nil {
		return err
	}
	p.ids.give(m.IDBase)
	m.IDBase, m.Lineage = rec.IDBase, rec.Lineage
	if err := writeJSONFile(b.l.meta(), m); err != nil {
		p.ids.give(rec.IDBase)
		return err
	}
	for _, d := range []string{b.l.sockDir(), filepath.Join(b.l.upperBase(m.Disk), "upper")} {
		if err := os.Lchown(d, int(m.IDBase), int(m.IDBase)); err != nil {
			return err
		}
	}
	b.cid.Store(nil)
	b.settled = closed
	return p.startFork(ctx, b, m, rec)
}

// shareRange holds rec's uid range for a fork, unless a sandbox of another lineage (or a warm pool
// entry) holds it now. Errors: ErrInvalidRequest then.
func (p *Provider) shareRange(rec checkpointRecord) error {
	if rec.IDBase == 0 {
		return fmt.Errorf("checkpoint %s records no uid range: %w", rec.ID, sandbox.ErrInvalidRequest)
	}
	if p.ids.holders(rec.IDBase) > 0 {
		for _, d := range []string{p.boxDir, p.pool.dir} {
			ents, _ := os.ReadDir(d)
			for _, e := range ents {
				m, err := readMetaFile(layout{dir: filepath.Join(d, e.Name())})
				if err == nil && m.IDBase == rec.IDBase && (d == p.pool.dir || cmp.Or(m.Lineage, m.Ref.ID) != rec.Lineage) {
					return fmt.Errorf("checkpoint %s: its uid range is another sandbox's now: %w", rec.ID, sandbox.ErrInvalidRequest)
				}
			}
		}
	}
	p.ids.hold(rec.IDBase)
	return nil
}
