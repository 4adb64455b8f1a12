package oci

import (
	"fmt"
	"runtime"
	"slices"
	"sync"

	seccomp "github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// sandboxCaps is the capability set of a sandbox's processes: runc's default, less everything that
// would let root inside reach past its namespaces.
var sandboxCaps = []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"}

// seccompFilter is the system call filter of every sandbox: moby's default profile (the one Docker and
// containerd ship), resolved for sandboxCaps. Among what it refuses to a process without CAP_SYS_ADMIN
// or CAP_SYS_PTRACE, which no sandbox has: new namespaces of any kind (clone and unshare with namespace
// flags, setns), mounts, keyctl/add_key/request_key, bpf, perf_event_open, userfaultfd, pidfd_getfd,
// kexec, module loading, and clone3 (ENOSYS, so that a libc falls back to the clone it can filter).
// ptrace and process_vm_readv/writev of a process of one's own stay allowed, so that debuggers work;
// the agent, PID 1, makes itself non-dumpable, which neither gets past without CAP_SYS_PTRACE.
//
// The filter admits the machine's own system call ABI only: the profile also lists the compatible
// ones (i386 and x32 beside x86-64), whose calls into the kernel's compat paths a sandbox has no need
// of, and each listed ABI multiplies the filter the runtime compiles at every start (libseccomp took
// ≈28 ms a container for the three, ≈2 ms for one: docs/performance.md).
//
// It is resolved once: the profile and the capabilities are the same for every sandbox.
var seccompFilter = sync.OnceValues(func() (*specs.LinuxSeccomp, error) {
	f, err := seccomp.GetDefaultProfile(&specs.Spec{Process: &specs.Process{
		Capabilities: &specs.LinuxCapabilities{Bounding: sandboxCaps}}})
	if err != nil {
		return nil, fmt.Errorf("seccomp profile: %w", err)
	}
	if native, ok := nativeArch[runtime.GOARCH]; ok && slices.Contains(f.Architectures, native) {
		f.Architectures = []specs.Arch{native}
	}
	return f, nil
})

// nativeArch is the seccomp name of each GOARCH's own system call ABI.
var nativeArch = map[string]specs.Arch{
	"amd64":   specs.ArchX86_64,
	"arm64":   specs.ArchAARCH64,
	"ppc64le": specs.ArchPPC64LE,
	"s390x":   specs.ArchS390X,
	"riscv64": specs.ArchRISCV64,
}
