package agent_test

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox/agent"
)

// TestLoadFilterRefusesMalformed: what is no program (nothing, a torn instruction, more than the
// kernel takes, a closed descriptor) is an error before anything is installed, never a start without
// the filter. The agent's own start with a real program is TestSeccompProgram's and the oci attack
// tests' (a process of the sandbox reads "Seccomp: 2").
func TestLoadFilterRefusesMalformed(t *testing.T) {
	for _, size := range []int{0, 7, 8*4096 + 8} {
		fd, err := unix.MemfdCreate("filter", unix.MFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Write(fd, make([]byte, size)); size > 0 && err != nil {
			t.Fatal(err)
		}
		unix.Seek(fd, 0, 0)
		if err := agent.LoadFilter(fd); err == nil || !strings.Contains(err.Error(), "no program") {
			t.Errorf("%d bytes: %v", size, err)
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
			t.Errorf("%d bytes: descriptor left open", size)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	fd, err := unix.Dup(int(r.Fd()))
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if err := agent.LoadFilter(fd); err == nil {
		t.Error("a closed descriptor: no error")
	}
	status, _ := os.ReadFile("/proc/self/status")
	if strings.Contains(string(status), "Seccomp:\t2") {
		t.Error("a filter was installed")
	}
}
