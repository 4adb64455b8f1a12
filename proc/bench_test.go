package proc

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
)

// The floor the runner is measured against: os/exec of true, no pipes, wait included.
func BenchmarkOSExecTrue(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRunTrue(b *testing.B) { benchRun(b, &Runner{}) }

func BenchmarkRunTrueReaper(b *testing.B) {
	reaper := NewReaper()
	defer reaper.Stop()
	benchRun(b, &Runner{Waiter: reaper, KillWait: time.Second, OOMScoreAdj: 500})
}

func benchRun(b *testing.B, r *Runner) {
	ctx := context.Background()
	cmd := sandbox.Command{Argv: []string{"true"}, Env: map[string]string{"PATH": "/usr/bin:/bin"}}
	dir := b.TempDir()
	for i := 0; i < b.N; i++ {
		res, err := r.Run(ctx, dir, cmd)
		if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
			b.Fatalf("%+v %v", res, err)
		}
	}
}
