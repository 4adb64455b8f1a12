package oci

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"

	gobpf "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	seccomp "github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
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

// seccompProgram is seccompFilter compiled to the classic BPF program the kernel runs, as an array of
// struct sock_filter in the machine's byte order: what the agent installs on itself before it serves
// (agent.LoadFilter), so that every process of the sandbox, all the agent's descendants, runs behind
// it. runc compiles a spec's filter with libseccomp at every container start, which cost ≈7 ms of a
// ≈48 ms start here (docs/performance.md); this is compiled once per daemon, in Go
// (github.com/elastic/go-seccomp-bpf), and handed to each sandbox as a sealed memfd.
//
// The program checks the architecture first (a call of another ABI gets the default action), answers
// ENOSYS to the x32 ABI's calls, then runs the profile's rules. It refuses what it cannot express
// exactly rather than compile something weaker: a comparison other than those below, a system call
// named under two actions, a refusing rule naming a call this architecture does not have.
var seccompProgram = sync.OnceValues(func() ([]byte, error) {
	f, err := seccompFilter()
	if err != nil {
		return nil, err
	}
	policy, err := seccompPolicy(f)
	if err != nil {
		return nil, fmt.Errorf("seccomp profile: %w", err)
	}
	insts, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp profile: %w", err)
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("seccomp profile: %w", err)
	}
	if len(raw) > bpfMaxInstructions {
		return nil, fmt.Errorf("seccomp profile: %d instructions, the kernel takes at most %d", len(raw), bpfMaxInstructions)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, ins := range raw {
		out = binary.NativeEndian.AppendUint16(out, ins.Op)
		out = append(out, ins.Jt, ins.Jf)
		out = binary.NativeEndian.AppendUint32(out, ins.K)
	}
	return out, nil
})

// bpfMaxInstructions is the kernel's bound on a classic BPF program (BPF_MAXINSNS).
const bpfMaxInstructions = 4096

// seccompPolicy translates the resolved profile f for the machine's own ABI. Rules are grouped by
// action, the unconditional ones of an action apart from those with argument conditions; a call
// allowed unconditionally needs none of its conditional rules. Names the architecture does not have
// are dropped from allowing rules (what libseccomp and runc do with them), which can only refuse more.
func seccompPolicy(f *specs.LinuxSeccomp) (*gobpf.Policy, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	if len(f.Architectures) != 1 || f.Architectures[0] != nativeArch[runtime.GOARCH] {
		return nil, fmt.Errorf("architectures %v: only the native one can be compiled", f.Architectures)
	}
	defaultAction, err := seccompAction(f.DefaultAction, f.DefaultErrnoRet)
	if err != nil {
		return nil, err
	}
	if defaultAction&unix.SECCOMP_RET_DATA != 0 {
		return nil, fmt.Errorf("default action %s with errno %d: not compiled", f.DefaultAction, defaultAction&unix.SECCOMP_RET_DATA)
	}
	if len(f.Flags) > 0 || f.ListenerPath != "" {
		return nil, fmt.Errorf("flags %v or a listener: not compiled", f.Flags)
	}
	type group struct {
		names []string
		conds map[string][]gobpf.ArgumentConditions
		order []string // of conds' keys, as the profile lists them
	}
	groups := map[gobpf.Action]*group{}
	var actions []gobpf.Action
	actionOf := map[string]gobpf.Action{}
	for _, rule := range f.Syscalls {
		action, err := seccompAction(rule.Action, rule.ErrnoRet)
		if err != nil {
			return nil, fmt.Errorf("rule %v: %w", rule.Names, err)
		}
		conds, err := seccompConditions(rule.Args)
		if err != nil {
			return nil, fmt.Errorf("rule %v: %w", rule.Names, err)
		}
		g := groups[action]
		if g == nil {
			g = &group{conds: map[string][]gobpf.ArgumentConditions{}}
			groups[action] = g
			actions = append(actions, action)
		}
		for _, name := range rule.Names {
			if _, ok := info.SyscallNames[name]; !ok {
				if action != gobpf.ActionAllow {
					return nil, fmt.Errorf("%s, refused by a rule, is not a system call of %s", name, info.Name)
				}
				continue
			}
			if a, ok := actionOf[name]; ok && a != action {
				return nil, fmt.Errorf("%s is named under two actions", name)
			}
			actionOf[name] = action
			if conds == nil {
				if !slices.Contains(g.names, name) {
					g.names = append(g.names, name)
				}
				continue
			}
			if _, ok := g.conds[name]; !ok {
				g.order = append(g.order, name)
			}
			g.conds[name] = append(g.conds[name], conds)
		}
	}
	p := &gobpf.Policy{DefaultAction: defaultAction}
	for _, action := range actions {
		g := groups[action]
		sg := gobpf.SyscallGroup{Names: g.names, Action: action}
		for _, name := range g.order {
			if slices.Contains(g.names, name) {
				continue // allowed whatever its arguments
			}
			for _, c := range g.conds[name] {
				sg.NamesWithCondtions = append(sg.NamesWithCondtions, gobpf.NameWithConditions{Name: name, Conditions: c})
			}
		}
		p.Syscalls = append(p.Syscalls, sg)
	}
	return p, nil
}

// seccompAction is the return value of a rule's action: an errno action returns errnoRet (EPERM when
// unset, as in runc). A default action must be one without data but EPERM's (the assembler's rule).
func seccompAction(a specs.LinuxSeccompAction, errnoRet *uint) (gobpf.Action, error) {
	switch a {
	case specs.ActAllow:
		return gobpf.ActionAllow, nil
	case specs.ActErrno:
		errno := uint(unix.EPERM)
		if errnoRet != nil {
			errno = *errnoRet
		}
		switch {
		case errno == uint(unix.EPERM):
			return gobpf.ActionErrno, nil // the assembler returns EPERM for it
		case errno == 0 || errno > 0xffff:
			return 0, fmt.Errorf("errno %d", errno)
		}
		return gobpf.ActionErrno | gobpf.Action(errno), nil
	case specs.ActKillProcess:
		return gobpf.ActionKillProcess, nil
	case specs.ActKill, specs.ActKillThread:
		return gobpf.ActionKillThread, nil
	}
	return 0, fmt.Errorf("action %s: not compiled", a)
}

// seccompConditions translates a rule's argument comparisons, all of which must hold (nil for none).
// libseccomp compares whole 64-bit arguments, unsigned, as the compiled program does.
func seccompConditions(args []specs.LinuxSeccompArg) (gobpf.ArgumentConditions, error) {
	if len(args) == 0 {
		return nil, nil
	}
	var out gobpf.ArgumentConditions
	for _, a := range args {
		if a.Index > 5 {
			return nil, fmt.Errorf("argument %d", a.Index)
		}
		op, ok := seccompOps[a.Op]
		switch {
		case !ok:
			return nil, fmt.Errorf("comparison %s: not compiled", a.Op)
		case a.ValueTwo != 0:
			// A masked comparison is (arg & value) == valueTwo: only valueTwo 0 (none of value's bits
			// set) has a compiled form; the others take no second value.
			return nil, fmt.Errorf("comparison %s with the second value %#x: not compiled", a.Op, a.ValueTwo)
		}
		out = append(out, gobpf.Condition{Argument: uint32(a.Index), Operation: op, Value: a.Value})
	}
	return out, nil
}

// seccompOps are the comparisons compiled, and what each becomes; OpMaskedEqual only with a second
// value of 0 (seccompConditions).
var seccompOps = map[specs.LinuxSeccompOperator]gobpf.Operation{
	specs.OpEqualTo:      gobpf.Equal,
	specs.OpNotEqual:     gobpf.NotEqual,
	specs.OpLessThan:     gobpf.LessThan,
	specs.OpLessEqual:    gobpf.LessOrEqual,
	specs.OpGreaterThan:  gobpf.GreaterThan,
	specs.OpGreaterEqual: gobpf.GreaterOrEqual,
	specs.OpMaskedEqual:  gobpf.BitsNotSet,
}

// seccompFile is the program as a sealed memfd, positioned at its start, for the agent to read as a
// descriptor of its own: nothing can change it once made.
func seccompFile() (*os.File, error) {
	prog, err := seccompProgram()
	if err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("sandboxd-seccomp", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "sandboxd-seccomp")
	if _, err := f.Write(prog); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
