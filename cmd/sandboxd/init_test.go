package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/testenv"
)

// initBudget is the most a package of this module may allocate while the binary initialises. Every oci
// sandbox's agent is this binary and pays for every package's initialisation, the daemon's included,
// before its first answer: work a package can do on first use must not be done at init. (Making a
// CRC table at init once cost each agent's start 0.2-0.6 ms.)
const initBudget = 8 << 10

const modulePath = "github.com/sandboxd/sandbox"

// TestPackageInitIsSmall runs the binary with the runtime's init trace and checks what each of this
// module's packages allocates at initialisation. Bytes, not time: they do not depend on the machine.
func TestPackageInitIsSmall(t *testing.T) {
	cmd := exec.Command(testenv.BuildAgent(t), "version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sandboxd version: %v\n%s", err, stderr.String())
	}
	// init github.com/sandboxd/sandbox/proc @2.2 ms, 0 ms clock, 88 bytes, 2 allocs
	line := regexp.MustCompile(`^init (\S+) @.* clock, (\d+) bytes, \d+ allocs$`)
	seen := 0
	sc := bufio.NewScanner(&stderr)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil || (m[1] != modulePath && !strings.HasPrefix(m[1], modulePath+"/")) {
			continue
		}
		seen++
		n, _ := strconv.Atoi(m[2])
		if n > initBudget {
			t.Errorf("package %s allocates %d bytes at initialisation, more than %d: make it on first use", m[1], n, initBudget)
		}
	}
	if seen == 0 {
		t.Fatalf("no package of this module in the init trace:\n%s", stderr.String())
	}
}
