package oci

import (
	"fmt"
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
// process_vm_readv/writev, kexec, module loading, and clone3 (ENOSYS, so that a libc falls back to the
// clone it can filter). ptrace of a process of one's own stays allowed, so that debuggers work; the
// agent, PID 1, makes itself non-dumpable, which no process without CAP_SYS_PTRACE gets past.
//
// It is resolved once: the profile and the capabilities are the same for every sandbox.
var seccompFilter = sync.OnceValues(func() (*specs.LinuxSeccomp, error) {
	f, err := seccomp.GetDefaultProfile(&specs.Spec{Process: &specs.Process{
		Capabilities: &specs.LinuxCapabilities{Bounding: sandboxCaps}}})
	if err != nil {
		return nil, fmt.Errorf("seccomp profile: %w", err)
	}
	return f, nil
})
