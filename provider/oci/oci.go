// Package oci is a sandbox provider with real isolation: each sandbox generation is one runc container
// with its own user (mapped to a host uid range of its own), mount, PID, network (loopback only, or a
// link of its own under the sandbox's egress policy: network.go), UTS and IPC namespaces, moby's
// default seccomp profile, a read-only root built from the host's /usr and a generated /etc, a
// writable /workspace on a disk of its own, and cgroup limits, each with a default. Inside it, the
// sandbox agent runs as PID 1 and serves commands and files on a unix socket in the sandbox's host
// directory (which no sandbox sees), bound by the provider before the container starts
// and handed to the agent as its descriptor 3; exec never goes through `runc exec`. With gVisor's runsc
// as the runtime, the same sandbox runs on gVisor's kernel, and its agent binds the socket the provider
// dials (runtime.go). docs/security.md says what each of these keeps out.
//
// Main invariant: everything a generation owns (container, cgroups, mounts, loop device, uid range,
// directory) is named from its (id, generation) and found again from the state directory alone, so an
// allocation is idempotent, a restarted provider re-adopts what is running, and Release leaves nothing
// behind.
package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
	"github.com/sandboxd/sandbox/internal/version"
)

// Config configures a Provider. StateDir and AgentPath are required.
type Config struct {
	StateDir  string       // where sandboxes and runc's state live
	Runtime   string       // the runtime binary, runc or gVisor's runsc (runtime.go); "runc" from PATH when empty
	AgentPath string       // the static agent binary, copied into the sandboxes' root at each start
	AgentArgs []string     // arguments before the agent's flags; default ["agent"] (`sandboxd agent`)
	Logger    *slog.Logger // default slog.Default()

	ReadyTimeout time.Duration // how long Allocate waits for the agent's first answer; default 10s
	StopGrace    time.Duration // between SIGTERM and SIGKILL on release; default 2s
	CallTimeout  time.Duration // bound of a file call or a health check; default 30s
	PidsLimit    int64         // processes and threads per sandbox; default 512
	TmpMiB       int64         // size of /tmp, /var/tmp and /dev/shm each; default 64
	TmpInodes    int64         // files each of those may hold; default 16384
	OpenFiles    int64         // RLIMIT_NOFILE of the agent and its commands; default 4096

	// The defaults a sandbox gets for what its spec leaves out, and the most it may ask for. Nothing a
	// sandbox runs is unbounded: its memory (and so its tmpfs), its /workspace disk, its processes, its
	// open files and the inodes of its tmpfs. Defaults: 1024 MiB of memory, at most the machine's;
	// a 1024 MiB disk, at most 65536 MiB.
	DefaultMemoryMiB int64
	MaxMemoryMiB     int64
	DefaultDiskMiB   int64
	MaxDiskMiB       int64

	// IDBase and IDRanges place the host uid ranges of the sandboxes' user namespaces (userns.go):
	// IDRanges ranges of IDRangeSize uids from IDBase on. Defaults: 2^30 and as many as fit below
	// 2^31. Two providers on one host should be given ranges apart.
	IDBase   uint32
	IDRanges uint32

	// WarmPool is how many started, never used containers the provider keeps ready, so that the
	// allocation of a sandbox with the default disk size takes one instead of starting a container
	// (see pool.go). Zero: none; every allocation starts its own.
	WarmPool int

	// ImagePools are warm pools of images and templates: started containers on an image's root, kept
	// ready for sandboxes whose spec.image or spec.template names the same digest (see imagepool.go).
	// On runc only.
	ImagePools []ImagePool

	// Spares is how many sandbox directories the provider keeps laid out ahead, each with a uid range,
	// the holder of its user namespace and a disk of the default size, so that a sandbox with that disk
	// which starts a container of its own (the warm pool empty, or off) need not make them (see
	// spare.go). Zero: none.
	Spares int

	// Network configures the networks of sandboxes whose policy lets something out (network.go).
	Network NetworkConfig
	// InsecureRegistries are the registries (host or host:port) images are pulled from over plain
	// HTTP; MaxLayerBytes bounds one layer's files unpacked (image.DefaultMaxLayerBytes when zero).
	InsecureRegistries []string
	MaxLayerBytes      int64
}

// Provider runs sandboxes as runc containers. It is safe for concurrent use.
type Provider struct {
	cfg    Config
	log    *slog.Logger
	runc   runc
	boxDir string
	root   string // the read-only root every sandbox shares (mountRoot)
	cgTag  string // distinguishes the cgroups of providers on different state directories
	ids    *idRanges
	idmap  bool // the runtime makes idmapped mounts
	disks  *diskTemplates

	mu    sync.Mutex
	boxes map[string]*box
	// found holds the state of each container the runtime listed when the provider started, until the
	// box of its sandbox is made or the container is removed (unclaimed, or a pool entry left behind):
	// one `runc list` tells a restarted provider what a `runc state` per sandbox would.
	found map[string]containerState

	pool       pool
	imagePools []*imagePool // the warm pools of images (imagepool.go)
	spares     spares
	net        *network    // nil: every sandbox on loopback only (network.go)
	relayPorts atomic.Bool // reach ports through the agents' relays even on runc (ports.go), for the tests

	volMu  sync.Mutex  // the volumes, and which sandboxes mount them (volume.go)
	images *imageState // nil where the runtime runs no images (image.go)

	// DataPlane runs commands and file calls through each sandbox's agent (Exec, ReadFile, WriteFile,
	// ListFiles); its clients come from usable, so a paused sandbox is ErrInvalidState.
	agentclient.DataPlane
}

var (
	_ sandbox.Provider     = (*Provider)(nil)
	_ sandbox.Executor     = (*Provider)(nil)
	_ sandbox.FileSystem   = (*Provider)(nil)
	_ sandbox.PauseResumer = (*Provider)(nil)
	_ sandbox.Volumes      = (*Provider)(nil)
	_ sandbox.UsageReader  = (*Provider)(nil)
	_ sandbox.PoolReporter = (*Provider)(nil)
	_ sandbox.Checkpointer = (*Provider)(nil)
)

// box is the provider's in-memory handle on one generation. Its lifecycle calls are serialized by mu;
// data calls only read the paused flag and the client.
type box struct {
	ref    sandbox.Ref
	cid    atomic.Pointer[string] // the runc container's name when it is not ref.Name() (taken from the pool)
	l      layout
	mu     sync.Mutex
	paused atomic.Bool
	known  atomic.Bool // paused reflects the container (set after the first look at it)
	gone   atomic.Bool
	client *agentclient.Client
	// settled closes once what start left to do on the host for the container is done (nil: nothing
	// is left); guarded by mu.
	settled <-chan struct{}
}

// saw records the container's status (runc's: created, running, paused, stopped) as the box's
// knowledge of it.
func (b *box) saw(status string) {
	b.paused.Store(status == "paused")
	b.known.Store(true)
}

// container is the name runc knows the box's container by.
func (b *box) container() string {
	if c := b.cid.Load(); c != nil {
		return *c
	}
	return b.ref.Name()
}

// Available reports whether the provider can run here: Linux, root, and runc on PATH.
func Available() (bool, string) {
	if runtime.GOOS != "linux" {
		return false, "the oci provider needs Linux"
	}
	if os.Geteuid() != 0 {
		return false, "the oci provider needs root"
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return false, "runc is not installed"
	}
	if _, err := os.Stat(cgroupRoot); err != nil {
		return false, "no cgroup filesystem at " + cgroupRoot
	}
	return true, ""
}

// runtimeWait bounds how long New waits for runtime processes an earlier provider left running.
const runtimeWait = 10 * time.Second

// New checks cfg, prepares the state directory and makes the process a child subreaper, so that it can
// reap container inits once runc has exited (a reaping PID 1 is not guaranteed). It waits, up to
// runtimeWait, for runtime processes an earlier provider left running on the same state directory (one
// killed half-way through a create leaves its `runc run` going), then finds, but does not touch, the
// sandboxes that provider left.
func New(cfg Config) (*Provider, error) {
	if cfg.StateDir == "" || cfg.AgentPath == "" {
		return nil, errors.New("oci: StateDir and AgentPath are required")
	}
	var err error
	if cfg.StateDir, err = filepath.Abs(cfg.StateDir); err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	if cfg.AgentPath, err = filepath.Abs(cfg.AgentPath); err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	if st, err := os.Stat(cfg.AgentPath); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("oci: agent %s is not a regular file: %v", cfg.AgentPath, err)
	}
	if !safeMountPath(cfg.StateDir) {
		return nil, fmt.Errorf("oci: state directory %q has characters mount options cannot carry", cfg.StateDir)
	}
	if cfg.Runtime == "" {
		cfg.Runtime = "runc"
	}
	if cfg.Runtime, err = exec.LookPath(cfg.Runtime); err != nil {
		return nil, fmt.Errorf("oci: runtime: %w", err)
	}
	class, err := detectClass(context.Background(), cfg.Runtime)
	if err == nil && class == classGVisor {
		err = checkGVisor(context.Background(), cfg.Runtime)
	}
	if err != nil {
		return nil, fmt.Errorf("oci: runtime: %w", err)
	}
	if cfg.AgentArgs == nil {
		cfg.AgentArgs = []string{"agent"}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 10 * time.Second
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 2 * time.Second
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 30 * time.Second
	}
	if cfg.PidsLimit <= 0 {
		cfg.PidsLimit = 512
	}
	if cfg.TmpMiB <= 0 {
		cfg.TmpMiB = 64
	}
	if cfg.TmpInodes <= 0 {
		cfg.TmpInodes = 16384
	}
	if cfg.OpenFiles <= 0 {
		cfg.OpenFiles = 4096
	}
	if cfg.DefaultMemoryMiB <= 0 {
		cfg.DefaultMemoryMiB = 1024
	}
	if cfg.MaxMemoryMiB <= 0 {
		cfg.MaxMemoryMiB = max(machineMemoryMiB(), cfg.DefaultMemoryMiB)
	}
	if cfg.DefaultDiskMiB <= 0 {
		cfg.DefaultDiskMiB = 1024
	}
	if cfg.MaxDiskMiB <= 0 {
		cfg.MaxDiskMiB = max(65536, cfg.DefaultDiskMiB)
	}
	if err := checkResources(sandbox.Resources{MemoryMiB: cfg.DefaultMemoryMiB, DiskMiB: cfg.DefaultDiskMiB}); err != nil {
		return nil, fmt.Errorf("oci: defaults: %w", err)
	}
	if cfg.DefaultMemoryMiB > cfg.MaxMemoryMiB || cfg.DefaultDiskMiB > cfg.MaxDiskMiB {
		return nil, fmt.Errorf("oci: a default is above its maximum (memory %d > %d MiB or disk %d > %d MiB)",
			cfg.DefaultMemoryMiB, cfg.MaxMemoryMiB, cfg.DefaultDiskMiB, cfg.MaxDiskMiB)
	}
	if cfg.IDBase == 0 {
		cfg.IDBase = defaultIDBase
	}
	if cfg.IDRanges == 0 {
		cfg.IDRanges = min(defaultIDRanges, (1<<32-1-cfg.IDBase)/IDRangeSize)
	}
	if cfg.IDRanges == 0 || uint64(cfg.IDBase)+uint64(cfg.IDRanges)*IDRangeSize > 1<<32-1 {
		return nil, fmt.Errorf("oci: %d uid ranges from %d do not fit below 2^32", cfg.IDRanges, cfg.IDBase)
	}
	if cfg.WarmPool < 0 || cfg.Spares < 0 {
		return nil, fmt.Errorf("oci: WarmPool %d or Spares %d is negative", cfg.WarmPool, cfg.Spares)
	}
	imagePools, err := newImagePools(cfg.ImagePools, class)
	if err != nil {
		return nil, err
	}
	p := &Provider{
		cfg:        cfg,
		log:        cfg.Logger.With("provider", "oci"),
		runc:       runc{path: cfg.Runtime, root: filepath.Join(cfg.StateDir, "runc"), class: class},
		boxDir:     filepath.Join(cfg.StateDir, "sandboxes"),
		boxes:      make(map[string]*box),
		pool:       pool{dir: filepath.Join(cfg.StateDir, "pool")},
		imagePools: imagePools,
		ids:        newIDRanges(cfg.IDBase, cfg.IDRanges),
		disks:      &diskTemplates{dir: filepath.Join(cfg.StateDir, "disks"), mib: cfg.DefaultDiskMiB},
	}
	slack := execSlack
	if class == classGVisor {
		slack = gvisorExecSlack
	}
	p.DataPlane = agentclient.DataPlane{Agents: agents{p}, ExecSlack: slack, CancelWait: cancelWait, CallTimeout: cfg.CallTimeout}
	p.cgTag = cgroupTag(cfg.StateDir)
	// The state directory and those of sandboxes are searchable by the sandboxes' unprivileged host
	// uids (their init mounts the root from inside their user namespace); the runtime's state is root's alone.
	for _, d := range []string{cfg.StateDir, p.boxDir, p.pool.dir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("oci: %w", err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return nil, fmt.Errorf("oci: %w", err)
		}
	}
	if err := searchable(cfg.StateDir); err != nil {
		return nil, fmt.Errorf("oci: state directory: %w", err)
	}
	if err := os.MkdirAll(p.runc.root, 0o700); err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	p.holdIDRanges()
	if class == classRunc && !cfg.Network.Off {
		// Before the sandboxes' /etc names their resolvers: the IPv6 pool, which may be taken now.
		nc := p.cfg.Network
		nc.Pool = cmpPrefix(nc.Pool, defaultPool)
		if p.cfg.Network.Pool6, err = pickPool6(nc, filepath.Join(cfg.StateDir, "net-pool6")); err != nil {
			return nil, fmt.Errorf("oci: %w", err)
		}
	}
	if p.root, err = mountRoot(cfg.StateDir, cfg.AgentPath, p.networkEtc()); err != nil {
		return nil, fmt.Errorf("oci: the sandboxes' root file system: %w", err)
	}
	if class == classRunc {
		if err := p.openImages(); err != nil {
			return nil, fmt.Errorf("oci: image store: %w", err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("oci: become a child subreaper: %w", err)
	}
	// Before anything judges what an earlier provider left: let its runtime calls finish first.
	if left := WaitRuntimes(context.Background(), p.runc.root, runtimeWait); len(left) > 0 {
		p.log.Warn("runtime processes of an earlier provider still run on this state directory; going on",
			"pids", left, "waited", runtimeWait)
	}
	if p.found, err = p.runc.list(context.Background()); err != nil {
		p.log.Warn("listing the containers an earlier provider left; each will be looked at alone", "err", err)
	}
	// Before a sandbox is allocated again under the name of a container nothing claims.
	p.removeOrphans(context.Background())
	p.tidyVolumes()
	if class == classRunc {
		p.thawSnapshots(context.Background())
	}
	if err := p.startNetwork(); err != nil {
		p.log.Warn("sandboxes get no network but loopback", "err", err)
	}
	if class == classRunc {
		p.idmap = p.runc.idmapMounts(context.Background())
	}
	p.startPool()
	return p, nil
}

// removeOrphans stops and deletes the containers on the provider's runtime root that no directory
// claims: a sandbox's (its own container, or the pool entry it took, named in its metadata) or a pool
// entry's. Nothing the provider does leaves one, but a directory removed by hand would leave a container
// running out of sight, and a sandbox allocated again under its name would fail. When any sandbox's
// metadata cannot be read, nothing is removed: that sandbox may be the claimant.
func (p *Provider) removeOrphans(ctx context.Context) {
	if len(p.found) == 0 {
		return
	}
	claimed, ok := p.claimedContainers()
	if !ok {
		return
	}
	for name := range p.found {
		if claimed[name] {
			continue
		}
		p.log.Warn("removing a container no sandbox or pool entry claims", "container", name)
		err := p.removeContainer(ctx, name)
		if err == nil {
			err = removeCgroups(p.cgroupPath(name))
		}
		if err != nil {
			p.log.Error("removing an unclaimed container", "container", name, "err", err)
			continue
		}
		delete(p.found, name)
	}
}

// holdIDRanges marks the uid ranges the directories an earlier provider left record as in use: a
// sandbox's stays its own, and a pool entry's until the entry is discarded.
func (p *Provider) holdIDRanges() {
	for _, d := range []string{p.boxDir, p.pool.dir} {
		ents, err := os.ReadDir(d)
		if err != nil {
			p.log.Warn("listing the uid ranges in use", "dir", d, "err", err)
			continue
		}
		for _, e := range ents {
			if m, err := readMetaFile(layout{dir: filepath.Join(d, e.Name())}); err == nil {
				p.ids.hold(m.IDBase)
			}
		}
	}
}

// claimedContainers returns the names of the containers a directory claims, or false when that cannot
// be told. A listed container named like a sandbox or pool directory is claimed by the name alone;
// only when one is not (a taken pool entry, or an orphan) are the sandboxes' metadata files read.
func (p *Provider) claimedContainers() (map[string]bool, bool) {
	claimed := map[string]bool{}
	var boxes []string
	for _, d := range []string{p.boxDir, p.pool.dir} {
		ents, err := os.ReadDir(d)
		if err != nil {
			p.log.Warn("listing what claims the containers left running; none removed", "dir", d, "err", err)
			return nil, false
		}
		for _, e := range ents {
			claimed[e.Name()] = true
			if d == p.boxDir {
				boxes = append(boxes, e.Name())
			}
		}
	}
	all := true
	for name := range p.found {
		all = all && claimed[name]
	}
	if all {
		return claimed, true
	}
	for _, name := range boxes {
		m, err := readMetaFile(layout{dir: filepath.Join(p.boxDir, name)})
		if err != nil && !os.IsNotExist(err) {
			p.log.Warn("sandbox metadata unreadable; no unclaimed container removed", "dir", name, "err", err)
			return nil, false
		}
		if m.Container != "" {
			claimed[m.Container] = true
		}
	}
	return claimed, true
}

// Manifest describes the provider.
func (p *Provider) Manifest(context.Context) (sandbox.Manifest, error) {
	return sandbox.Manifest{
		Name:         "oci",
		Version:      version.Version,
		RuntimeClass: string(p.runc.class),
		Capabilities: sandbox.Capabilities{
			CommandExecution: true,
			FileAccess:       true,
			PauseResume:      true,
			ResourceLimits:   true,
			// Background processes on a pty (the agent's SpawnPTY), their terminal a WebSocket.
			InteractiveTerminal: true,
			// Volumes are idmapped mounts, which gVisor's file server does not serve (volume.go).
			PersistentVolume: p.runc.class == classRunc,
			NetworkPolicy:    p.net != nil,
			ImageReference:   p.images != nil,
			// gVisor's kernel saves and restores itself (checkpoint.go). runc would need CRIU, and
			// the only CRIU the machine's package sources offer (Debian 12's 3.17.1; bookworm,
			// bookworm-updates and bookworm-security, no backports) fails its own `criu check` on this
			// kernel (6.18): "vdso: Unexpected rt vDSO area bounds", "Could not initialize kernel
			// features detection". So runc says false (docs/checkpoints.md, "Why not runc").
			MemorySnapshot: p.runc.class == classGVisor,
			// Through the agent (ports.go); tested on runc.
			PortForwarding: p.runc.class == classRunc,
			// Snapshots are images of the store, and templates names of them (snapshots.go).
			FilesystemSnapshot: p.images != nil,
			TemplateReference:  p.images != nil,
		},
	}, nil
}

// Resources lists every generation with a directory in the state directory, running or not.
func (p *Provider) Resources(context.Context) ([]sandbox.Ref, error) {
	ents, err := os.ReadDir(p.boxDir)
	if err != nil {
		return nil, fmt.Errorf("oci: list sandboxes: %v: %w", err, sandbox.ErrProviderUnavailable)
	}
	var refs []sandbox.Ref
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		m, err := readMeta(layout{dir: filepath.Join(p.boxDir, e.Name())})
		if err != nil {
			p.log.Warn("sandbox directory without metadata", "dir", e.Name(), "err", err)
			continue
		}
		refs = append(refs, m.Ref)
	}
	for _, ref := range p.preparingRefs() {
		if !slices.Contains(refs, ref) {
			refs = append(refs, ref)
		}
	}
	return refs, nil
}

// readMeta reads the metadata of the sandbox directory l, which must name the generation it holds.
func readMeta(l layout) (meta, error) {
	m, err := readMetaFile(l)
	if err != nil {
		return meta{}, err
	}
	if filepath.Base(l.dir) != m.Ref.Name() {
		return meta{}, fmt.Errorf("metadata of %s in directory %s", m.Ref.Name(), l.dir)
	}
	return m, nil
}

// readMetaFile reads the metadata in directory l, a sandbox's or a pool entry's.
func readMetaFile(l layout) (meta, error) {
	raw, err := os.ReadFile(l.meta())
	if err != nil {
		return meta{}, err
	}
	var m meta
	if err := json.Unmarshal(raw, &m); err != nil {
		return meta{}, err
	}
	return m, nil
}

// box returns the handle of ref, making one if needed: a restarted provider adopts sandboxes this way,
// learning from the metadata the name of a container that came from the pool.
func (p *Provider) box(ref sandbox.Ref) *box {
	name := ref.Name()
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.boxes[name]
	if !ok {
		l := layout{dir: filepath.Join(p.boxDir, name)}
		b = &box{ref: ref, l: l, client: agentclient.New(dialAgent(l))}
		if m, err := readMeta(l); err == nil && m.Container != "" {
			b.cid.Store(&m.Container)
		}
		if st, ok := p.found[b.container()]; ok {
			delete(p.found, b.container())
			b.saw(st.Status)
		}
		p.boxes[name] = b
	}
	return b
}

func (p *Provider) forget(b *box) {
	p.mu.Lock()
	if p.boxes[b.ref.Name()] == b {
		delete(p.boxes, b.ref.Name())
	}
	p.mu.Unlock()
	b.gone.Store(true)
	b.client.Close()
}

// listenAgent binds and listens on the agent's socket, on the host, and returns the listening socket
// for the container to inherit. Only the owner may connect.
func listenAgent(l layout) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "agent-listener")
	err = inRunDir(l, func(sock string) error {
		if err := unix.Bind(fd, &unix.SockaddrUnix{Name: sock}); err != nil {
			return err
		}
		return os.Chmod(sock, 0o600)
	})
	if err == nil {
		err = unix.Listen(fd, 4096)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// inRunDir calls fn with a path of the agent's socket short enough for sockaddr_un: the socket's own
// path, or one through /proc/self/fd of its directory.
func inRunDir(l layout, fn func(sock string) error) error {
	sock := l.socket()
	if len(sock) < len(unix.RawSockaddrUnix{}.Path) {
		return fn(sock)
	}
	fd, err := unix.Open(l.runDir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return fn("/proc/self/fd/" + strconv.Itoa(fd) + "/" + filepath.Base(sock))
}

// cgroupTag names the cgroups of the provider on stateDir apart from those of providers on other state
// directories.
func cgroupTag(stateDir string) string {
	sum := sha256.Sum256([]byte(stateDir))
	return hex.EncodeToString(sum[:4])
}

// dialAgent connects to the agent's socket. A socket path too long for sockaddr_un is dialled through
// /proc/self/fd of its directory.
func dialAgent(l layout) func(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context) (conn net.Conn, err error) {
		err = inRunDir(l, func(sock string) (err error) {
			conn, err = d.DialContext(ctx, "unix", sock)
			return err
		})
		return conn, err
	}
}
