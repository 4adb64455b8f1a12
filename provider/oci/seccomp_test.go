package oci

import (
	"encoding/binary"
	"runtime"
	"slices"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// TestSeccompFilter: the sandboxes' filter is moby's default profile on the machine's own ABI only,
// refusing by default, with nothing the sandbox must not have among what it allows.
func TestSeccompFilter(t *testing.T) {
	f, err := seccompFilter()
	if err != nil {
		t.Fatal(err)
	}
	if native, ok := nativeArch[runtime.GOARCH]; ok && !slices.Equal(f.Architectures, []specs.Arch{native}) {
		t.Errorf("architectures %v, want only %s", f.Architectures, native)
	}
	if f.DefaultAction != specs.ActErrno {
		t.Errorf("default action %s", f.DefaultAction)
	}
	for _, sc := range f.Syscalls {
		if sc.Action != specs.ActAllow {
			continue
		}
		for _, name := range sc.Names {
			switch name {
			case "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "pidfd_getfd",
				"mount", "umount2", "unshare", "setns", "kexec_load", "init_module":
				t.Errorf("%s is allowed", name)
			}
		}
	}
}

// TestSeccompProgram runs the compiled program the agents install (seccompProgram, decoded from its
// bytes) in a BPF interpreter, and checks that it gives every system call of the machine's ABI, with a
// spread of arguments, the answer the profile gives it (read by allowedBy, a reading of the spec's rules
// of its own), as well as the answers the isolation rests on, named one by one.
func TestSeccompProgram(t *testing.T) {
	raw, err := seccompProgram()
	if err != nil {
		t.Fatal(err)
	}
	if len(raw)%8 != 0 || len(raw)/8 > bpfMaxInstructions {
		t.Fatalf("%d bytes", len(raw))
	}
	ins := make([]bpf.RawInstruction, len(raw)/8)
	for i := range ins {
		b := raw[8*i:]
		ins[i] = bpf.RawInstruction{Op: binary.NativeEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.NativeEndian.Uint32(b[4:])}
	}
	prog, ok := bpf.Disassemble(ins)
	if !ok {
		t.Fatal("the program holds an instruction the interpreter does not know")
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	run := func(auditArch uint32, nr int, args ...uint64) uint32 {
		t.Helper()
		// struct seccomp_data, each 32-bit word as the kernel loads it (the interpreter reads words
		// big-endian): nr, arch, instruction pointer, six arguments.
		data := make([]byte, 64)
		binary.BigEndian.PutUint32(data[0:], uint32(nr))
		binary.BigEndian.PutUint32(data[4:], auditArch)
		for i, a := range args {
			lo, hi := 16+8*i, 16+8*i+4
			if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
				lo, hi = hi, lo
			}
			binary.BigEndian.PutUint32(data[lo:], uint32(a))
			binary.BigEndian.PutUint32(data[hi:], uint32(a>>32))
		}
		v, err := vm.Run(data)
		if err != nil {
			t.Fatal(err)
		}
		return uint32(v)
	}
	native := uint32(info.ID)
	const (
		allow  = uint32(unix.SECCOMP_RET_ALLOW)
		eperm  = uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.EPERM)
		enosys = uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.ENOSYS)
	)
	f, err := seccompFilter()
	if err != nil {
		t.Fatal(err)
	}
	argSets := [][]uint64{{}, {0, 0, 0}, {1 << 40}, {unix.CLONE_NEWUSER}, {unix.CLONE_NEWNS | uint64(unix.SIGCHLD)}, {uint64(unix.SIGCHLD)}, {0xffffffff}}
	for family := uint64(0); family < 48; family++ {
		argSets = append(argSets, []uint64{family, unix.SOCK_STREAM, 0})
	}
	checked := 0
	for name, nr := range info.SyscallNames {
		for _, args := range argSets {
			want := eperm
			if a, ok := actionBy(f, name, args); ok {
				want = a
			}
			if got := run(native, nr, args...); got != want {
				t.Errorf("%s%v: %#x, the profile says %#x", name, args, got, want)
			}
			checked++
		}
	}
	named := []struct {
		name string
		args []uint64
		want uint32
	}{
		{"read", nil, allow}, {"execve", nil, allow}, {"clone", []uint64{uint64(unix.SIGCHLD)}, allow},
		{"clone", []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, eperm}, {"clone", []uint64{unix.CLONE_NEWNET}, eperm},
		{"clone3", nil, enosys}, {"unshare", nil, eperm}, {"setns", nil, eperm}, {"mount", nil, eperm},
		{"keyctl", nil, eperm}, {"add_key", nil, eperm}, {"request_key", nil, eperm}, {"bpf", nil, eperm},
		{"perf_event_open", nil, eperm}, {"userfaultfd", nil, eperm}, {"pidfd_getfd", nil, eperm},
		{"socket", []uint64{unix.AF_INET}, allow}, {"socket", []uint64{unix.AF_UNIX}, allow},
		{"socket", []uint64{unix.AF_VSOCK}, eperm}, {"socket", []uint64{1<<32 | unix.AF_INET}, eperm},
	}
	for _, c := range named {
		if got := run(native, info.SyscallNames[c.name], c.args...); got != c.want {
			t.Errorf("%s%v: %#x, want %#x", c.name, c.args, got, c.want)
		}
	}
	// Another ABI gets the default answer; the x32 ABI's calls, ENOSYS.
	if got := run(uint32(arch.I386.ID), 0); got != eperm {
		t.Errorf("an i386 call: %#x", got)
	}
	if info.ID == arch.X86_64.ID {
		if got := run(native, info.SyscallNames["read"]|arch.X32.SeccompMask); got != enosys {
			t.Errorf("an x32 read: %#x", got)
		}
	}
	t.Logf("%d instructions, %d calls checked", len(ins), checked)
}

// actionBy is the answer the profile f gives the call name with args, by its own rules: the first rule
// that names it and whose comparisons all hold (no call is named under two actions: seccompPolicy).
func actionBy(f *specs.LinuxSeccomp, name string, args []uint64) (uint32, bool) {
	arg := func(i uint) uint64 {
		if int(i) < len(args) {
			return args[i]
		}
		return 0
	}
	for _, r := range f.Syscalls {
		if !slices.Contains(r.Names, name) {
			continue
		}
		holds := true
		for _, a := range r.Args {
			v := arg(a.Index)
			switch a.Op {
			case specs.OpEqualTo:
				holds = holds && v == a.Value
			case specs.OpNotEqual:
				holds = holds && v != a.Value
			case specs.OpLessThan:
				holds = holds && v < a.Value
			case specs.OpLessEqual:
				holds = holds && v <= a.Value
			case specs.OpGreaterThan:
				holds = holds && v > a.Value
			case specs.OpGreaterEqual:
				holds = holds && v >= a.Value
			case specs.OpMaskedEqual:
				holds = holds && v&a.Value == a.ValueTwo
			default:
				panic(a.Op)
			}
		}
		if !holds {
			continue
		}
		switch r.Action {
		case specs.ActAllow:
			return uint32(unix.SECCOMP_RET_ALLOW), true
		case specs.ActErrno:
			errno := uint32(unix.EPERM)
			if r.ErrnoRet != nil {
				errno = uint32(*r.ErrnoRet)
			}
			return uint32(unix.SECCOMP_RET_ERRNO) | errno, true
		}
		panic(r.Action)
	}
	return 0, false
}
