package oci_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
)

// TestUsage: what the provider reads of a sandbox's cgroups and disk moves with what runs in it: CPU
// time after a busy loop, memory after a file in its tmpfs, processes while some sleep, the disk's
// used bytes after a write; the limits are the sandbox's. An unknown generation is not found.
func TestUsage(t *testing.T) {
	p := newProvider(t)
	ref := ready(t, p, &sandbox.Resources{MemoryMiB: 128, DiskMiB: 64})
	before, err := p.Usage(ctxFor(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	gvisor := onGVisor(t, p)
	if before.CPUSeconds == nil || before.MemoryBytes == nil || before.Pids == nil || (before.DiskBytes == nil) != gvisor {
		// On gVisor the disk is its file server's, not a mount in the container's root: not read.
		t.Fatalf("figures missing: %+v", before)
	}
	if before.MemoryLimitBytes == nil || *before.MemoryLimitBytes != 128<<20 {
		t.Errorf("memory limit %d, want %d", deref(before.MemoryLimitBytes), 128<<20)
	}
	if !gvisor && (before.DiskLimitBytes == nil || *before.DiskLimitBytes < 48<<20 || *before.DiskLimitBytes > 64<<20) {
		t.Errorf("disk limit %d, want about 64 MiB", deref(before.DiskLimitBytes))
	}
	if before.PidsLimit == nil || *before.PidsLimit <= 0 {
		t.Errorf("pids limit %d", deref(before.PidsLimit))
	}
	// Busy for a while, and a file on the disk.
	if r := sh(t, p, ref, `i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done
		head -c 8388608 /dev/zero > /workspace/f && sync`); code(r) != 0 {
		t.Fatalf("script: %+v", r)
	}
	after, err := p.Usage(ctxFor(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	if *after.CPUSeconds <= *before.CPUSeconds {
		t.Errorf("CPU %v s after a busy loop, %v s before", *after.CPUSeconds, *before.CPUSeconds)
	}
	if !gvisor && *after.DiskBytes < *before.DiskBytes+(7<<20) {
		t.Errorf("disk %d bytes after an 8 MiB file, %d before", *after.DiskBytes, *before.DiskBytes)
	}
	// While a command runs three sleepers (a command's processes end with it), they are counted.
	done := make(chan sandbox.CommandResult, 1)
	go func() { done <- sh(t, p, ref, `for n in 1 2 3; do sleep 30 & done; touch /workspace/started; wait`) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		u, err := p.Usage(ctxFor(t), ref)
		if err != nil {
			t.Fatal(err)
		}
		if *u.Pids >= *before.Pids+4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d processes while three sleepers run, %d before", *u.Pids, *before.Pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := p.Exec(ctxFor(t), ref, sandbox.Command{Argv: []string{"pkill", "sleep"}, Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	<-done
	if *after.MemoryPeakBytes < *after.MemoryBytes {
		t.Errorf("peak %d below current %d", *after.MemoryPeakBytes, *after.MemoryBytes)
	}
	gone := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	if _, err := p.Usage(ctxFor(t), gone); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("usage of an unknown sandbox: %v", err)
	}
}

func deref(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}
