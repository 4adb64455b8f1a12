package oci

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
)

// Paths inside the container.
const (
	guestWorkdir  = "/workspace"
	guestAgent    = "/.sandboxd/agent"
	guestHostname = "sandbox"
)

// layout names the host paths of one sandbox generation. Everything lives under dir.
type layout struct {
	dir string
}

func (l layout) meta() string     { return filepath.Join(l.dir, "meta.json") }
func (l layout) runDir() string   { return filepath.Join(l.dir, "run") }
func (l layout) socket() string   { return filepath.Join(l.runDir(), "agent.sock") }
func (l layout) sockDir() string  { return filepath.Join(l.dir, "sock") } // gVisor's agent binds in it
func (l layout) diskImg() string  { return filepath.Join(l.dir, "disk.img") }
func (l layout) diskDir() string  { return filepath.Join(l.dir, "disk") }
func (l layout) runcLog() string  { return filepath.Join(l.dir, "runc.log") }
func (l layout) agentLog() string { return filepath.Join(l.dir, "agent.log") }

// meta is what a sandbox directory says of itself, so that a restarted provider can find it.
type meta struct {
	Ref        sandbox.Ref       `json:"ref"`
	Container  string            `json:"container,omitempty"` // runc's name for it; empty: Ref.Name()
	Resources  sandbox.Resources `json:"resources"`
	CgroupPath string            `json:"cgroupPath"`
	Disk       bool              `json:"disk"`
	// IDBase is the first host uid (and gid) of the sandbox's user namespace (userns.go); zero for a
	// generation laid out before sandboxes had one, which runs on as it started.
	IDBase uint32 `json:"idBase,omitempty"`
	// Lineage is the sandbox whose uid range a fork shares (checkpoint.go); empty: its own.
	Lineage sandbox.ID `json:"lineage,omitempty"`
	// Volumes are the persistent volumes the sandbox mounts (volume.go).
	Volumes []sandbox.VolumeMount `json:"volumes,omitempty"`
	// Image is the image the sandbox runs on, held in the store for it (image.go); nil: the shared root.
	Image *imageInfo `json:"image,omitempty"`
}

// upperBase is the directory that holds the sandbox's /workspace ("upper", for the layers an image
// will put under it): on its disk, or in its directory when it has none.
func (l layout) upperBase(disk bool) string {
	if disk {
		return l.diskDir()
	}
	return filepath.Join(l.dir, "upper")
}

// hostEtcBinds are the host files and directories bound read-only into the generated /etc. Nothing
// with secrets: no shadow files, no keys (/etc/ssl/private is masked).
var hostEtcBinds = []struct {
	path string
	dir  bool
}{
	{"/etc/alternatives", true},
	{"/etc/ssl", true},
	{"/etc/ld.so.cache", false},
}

// rootSymlinks are the top-level names that are symlinks into /usr on a merged-/usr host.
var rootSymlinks = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// etcFiles are the generated files of the sandbox's /etc.
var etcFiles = map[string]string{
	"passwd":        "root:x:0:0:root:/workspace:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
	"group":         "root:x:0:\nnogroup:x:65534:\n",
	"hosts":         "127.0.0.1\tlocalhost " + guestHostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	"hostname":      guestHostname + "\n",
	"resolv.conf":   "# no network: loopback only\n",
	"nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
}

// rootDir is where a provider mounts the root every sandbox of it starts on (mountRoot).
func rootDir(stateDir string) string { return filepath.Join(stateDir, "root") }

// mountRoot mounts the read-only root every sandbox of the provider shares at rootDir: a tmpfs of its
// own, made afresh at each start, that holds the skeleton (buildRootfs) and a copy of the agent binary.
// Being a file system of its own, it shows in a sandbox's /proc/self/mountinfo as "/" of a tmpfs,
// where a directory of the host's would show its host path (the state directory's, and the agent
// binary's when that was bound in). A root an earlier provider left mounted goes first: its sandboxes
// hold mounts of their own of it, which live on.
// etc replaces files of the generated /etc (etcFiles) by name.
func mountRoot(stateDir, agentPath string, etc map[string]string) (string, error) {
	root := rootDir(stateDir)
	if err := os.MkdirAll(root, 0o711); err != nil {
		return "", err
	}
	for unix.Unmount(root, unix.MNT_DETACH) == nil {
	}
	bin, err := os.Open(agentPath)
	if err != nil {
		return "", err
	}
	defer bin.Close()
	st, err := bin.Stat()
	if err != nil {
		return "", err
	}
	opts := fmt.Sprintf("mode=0755,size=%d,nr_inodes=1024", st.Size()+1<<20)
	if err := unix.Mount("sandboxd-root", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", fmt.Errorf("mount a tmpfs on %s: %w", root, err)
	}
	err = buildRootfs(root, bin, etc)
	if err == nil {
		// Read-only for every mount of it, the sandboxes' included.
		err = unix.Mount("", root, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
	}
	if err != nil {
		unix.Unmount(root, unix.MNT_DETACH)
		return "", err
	}
	return root, nil
}

// unmountRoot unmounts the root at rootDir on the host, once the provider is done with it.
func unmountRoot(stateDir string) {
	for unix.Unmount(rootDir(stateDir), unix.MNT_DETACH) == nil {
	}
}

// buildRootfs makes the skeleton root at root: empty mount points, symlinks into /usr as on the host,
// a generated /etc, and the agent, a copy of agent. It is mounted read-only; only /tmp and /workspace
// are writable in the sandbox.
func buildRootfs(root string, agent io.Reader, etcOverrides map[string]string) error {
	dirs := []string{"usr", "etc", "proc", "dev", "sys", "tmp", "workspace", "run", "var/tmp", ".sandboxd", guestSockDir}
	for _, r := range volumeRoots[1:] {
		dirs = append(dirs, strings.TrimPrefix(r, "/")) // empty mount points for volumes (volume.go)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	bin, err := os.OpenFile(filepath.Join(root, guestAgent), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	_, err = io.Copy(bin, agent)
	if cerr := bin.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy the agent: %w", err)
	}
	for _, name := range rootSymlinks {
		target, err := os.Readlink("/" + name)
		if err != nil {
			continue // absent, or a real directory on this host: not offered
		}
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			return err
		}
	}
	etc := filepath.Join(root, "etc")
	for name, content := range etcFiles {
		if c, ok := etcOverrides[name]; ok {
			content = c
		}
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	for _, b := range hostEtcBinds {
		if _, err := os.Stat(b.path); err != nil {
			continue
		}
		p := filepath.Join(root, b.path)
		var err error
		if b.dir {
			err = os.MkdirAll(p, 0o755)
		} else {
			err = os.WriteFile(p, nil, 0o644)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// gvisorHostPids is the host pids limit of a gVisor sandbox whose kernel runs at most tasks tasks.
func gvisorHostPids(tasks int64) int64 { return 4*tasks + 256 }

// memoryLimit is the memory limit of res in bytes, for memory and for memory+swap alike.
func memoryLimit(res sandbox.Resources) int64 { return res.MemoryMiB << 20 }

// cpuQuota is the CPU limit of res as a CFS quota and period, in microseconds: its millicores of a
// 100 ms period.
func cpuQuota(res sandbox.Resources) (quota int64, period uint64) {
	return res.CPUMillis * 100, 100000
}

// containerSpec is the runtime spec of one sandbox generation, joining the user namespace at userns
// (holdUserNS), or having the runtime make one when that is empty. A gVisor sandbox's differs where
// runsc takes less (runtime.go): no "rro", no overlay (its /workspace is the upper directory, bound),
// no mqueue, and the agent binds its socket itself.
func (p *Provider) containerSpec(l layout, m meta, userns string) (*specs.Spec, error) {
	gvisor := p.runc.class == classGVisor
	upper := l.upperBase(m.Disk)
	rro := "rro"
	if gvisor {
		rro = "ro"
	}
	pids := p.cfg.PidsLimit
	res := &specs.LinuxResources{
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
		Pids:    &specs.LinuxPids{Limit: &pids},
	}
	if m.Resources.MemoryMiB > 0 {
		memLimit := memoryLimit(m.Resources)
		swap := memLimit // memory+swap: no swap beyond the limit
		res.Memory = &specs.LinuxMemory{Limit: &memLimit, Swap: &swap}
	}
	if m.Resources.CPUMillis > 0 {
		quota, period := cpuQuota(m.Resources)
		res.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	// A host directory bound read-only shows its real owners inside the sandbox's user namespace when
	// the runtime makes idmapped mounts; else they show as the overflow uid, readable all the same.
	var idmapped []string
	var ids []specs.LinuxIDMapping
	if m.IDBase != 0 {
		ids = idMapping(m.IDBase)
		if p.idmap {
			idmapped = []string{"idmap"}
		}
	}
	hostBind := func(dst, src string, opts ...string) specs.Mount {
		mnt := specs.Mount{Destination: dst, Type: "bind", Source: src, Options: append(opts, idmapped...)}
		if len(idmapped) > 0 {
			mnt.UIDMappings, mnt.GIDMappings = ids, ids
		}
		return mnt
	}
	tmpfs := func(dst, mode string, mib int64, opts ...string) specs.Mount {
		return specs.Mount{Destination: dst, Type: "tmpfs", Source: "tmpfs", Options: append(opts,
			"mode="+mode, fmt.Sprintf("size=%dm", mib), fmt.Sprintf("nr_inodes=%d", p.cfg.TmpInodes))}
	}
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		tmpfs("/dev", "755", 1, "nosuid", "strictatime"),
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		tmpfs("/dev/shm", "1777", p.cfg.TmpMiB, "nosuid", "noexec", "nodev"),
	}
	if !gvisor {
		mounts = append(mounts, specs.Mount{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}})
	}
	mounts = append(mounts,
		specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		hostBind("/usr", "/usr", "rbind", rro, "nosuid", "nodev"),
	)
	for _, b := range hostEtcBinds {
		if _, err := os.Stat(b.path); err != nil {
			continue
		}
		mounts = append(mounts, hostBind(b.path, b.path, "rbind", rro, "nosuid", "nodev", "noexec"))
	}
	mounts = append(mounts,
		tmpfs("/tmp", "1777", p.cfg.TmpMiB, "nosuid", "nodev"),
		tmpfs("/var/tmp", "1777", p.cfg.TmpMiB, "nosuid", "nodev"),
		tmpfs("/run", "755", 1, "nosuid", "nodev"),
		// A bind of a directory on the sandbox's own disk: its view of the mount names no host path.
		specs.Mount{Destination: guestWorkdir, Type: "bind", Source: filepath.Join(upper, "upper"),
			Options: []string{"rbind", "rw", "nosuid", "nodev"}},
	)
	if gvisor {
		mounts = append(mounts,
			specs.Mount{Destination: guestSockDir, Type: "bind", Source: l.sockDir(), Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}})
	}
	for _, r := range volumeParents(m.Volumes) {
		// A volume below one of the root's mount points: a small tmpfs there first, for the
		// runtime to make the volume's mount point in.
		mounts = append(mounts, tmpfs(r, "755", 1, "nosuid", "nodev", "noexec"))
	}
	for i, v := range m.Volumes {
		// The sandbox's idmapped clone of the volume's mount (volume.go), which the container keeps.
		rw := "rw"
		if v.ReadOnly {
			rw = "ro"
		}
		mounts = append(mounts, specs.Mount{Destination: v.MountPath, Type: "bind", Source: l.volumeClone(i),
			Options: []string{"bind", rw, "nosuid", "nodev"}})
	}
	// On runc, the agent takes its listening socket as descriptor 3 (listenAgent) and the seccomp
	// program to install on itself as descriptor 4 (seccompFile). gVisor's kernel applies the spec's
	// filter itself (runc.go), and the agent binds its socket (takeAgentSocket).
	listen := []string{"-listen-fd", "3", "-seccomp-fd", "4"}
	if gvisor {
		listen = []string{"-socket", guestSockDir + "/agent.sock"}
	}
	args := append([]string{guestAgent}, p.cfg.AgentArgs...)
	args = append(args, listen...)
	args = append(args, "-root", "/", "-workdir", guestWorkdir,
		// The agent lowers its own open files limit, which its commands inherit: a runtime cannot set
		// rlimits in a user namespace it does not own without CAP_SYS_RESOURCE.
		"-nofile", strconv.FormatInt(p.cfg.OpenFiles, 10))
	spec := &specs.Spec{
		Version:  specs.Version,
		Hostname: guestHostname,
		Root:     &specs.Root{Path: p.root, Readonly: true},
		Process: &specs.Process{
			Args: args,
			Env: []string{
				"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"HOME=" + guestWorkdir,
				"LANG=C.UTF-8",
				"TMPDIR=/tmp",
				// The agent runs on one P; told before it starts, its runtime begins that way, ≈0.5 ms
				// sooner than resizing after (agent.Main). The agent's commands do not inherit it.
				"GOMAXPROCS=1",
			},
			Cwd:             guestWorkdir,
			User:            specs.User{UID: 0, GID: 0},
			NoNewPrivileges: true,
			Capabilities: &specs.LinuxCapabilities{
				Bounding: sandboxCaps, Effective: sandboxCaps, Permitted: sandboxCaps,
			},
		},
		Mounts: mounts,
		Linux: &specs.Linux{
			CgroupsPath: m.CgroupPath,
			Resources:   res,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
			},
			MaskedPaths: []string{
				"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi",
				"/etc/ssl/private",
			},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
	if m.IDBase != 0 {
		// The mappings are those of the namespace joined; runc 1.1 wants them named all the same.
		spec.Linux.Namespaces = append(spec.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace, Path: userns})
		spec.Linux.UIDMappings, spec.Linux.GIDMappings = ids, ids
	}
	if gvisor {
		// The sandbox's processes and threads are its kernel's tasks, counted by that kernel against
		// RLIMIT_NPROC (all run as its root, without CAP_SYS_RESOURCE to raise it): past the limit a
		// fork fails, as past a pids cgroup's. The host's pids cgroup bounds the kernel's own host
		// processes and threads, two to three for each of those tasks (its stubs) and its own: were
		// it the tighter bound, a fork bomb would end the kernel instead of failing inside it.
		spec.Process.Rlimits = []specs.POSIXRlimit{{Type: "RLIMIT_NPROC", Hard: uint64(pids), Soft: uint64(pids)}}
		hostPids := gvisorHostPids(pids)
		res.Pids.Limit = &hostPids
	}
	if gvisor {
		var err error
		if spec.Linux.Seccomp, err = seccompFilter(); err != nil {
			return nil, err
		}
	} else if _, err := seccompProgram(); err != nil {
		return nil, err // no bundle whose agent would go without its filter
	}
	return spec, nil
}

func writeJSONFile(path string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// safeMountPath reports whether p can appear in overlay mount options.
func safeMountPath(p string) bool { return !strings.ContainsAny(p, ",:\\ \n\t") }
