package oci

import (
	"runtime"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
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
