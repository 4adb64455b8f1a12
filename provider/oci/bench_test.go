package oci_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/oci"
)

// percentiles times each call of op and reports p50 and p99 beside ns/op.
func percentiles(b *testing.B, op func(i int)) {
	b.Helper()
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		op(i)
		d = append(d, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(d)
	ms := func(q float64) float64 { return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000 }
	b.ReportMetric(ms(0.50), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
}

func BenchmarkCreateToReady(b *testing.B) {
	p := newProvider(b)
	ctx := context.Background()
	refs := make([]sandbox.Ref, 0, b.N)
	percentiles(b, func(int) {
		ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
		obs, err := p.Allocate(ctx, ref, sandbox.Spec{ClientRequestID: "bench"})
		if err != nil || obs.State != sandbox.ObservedReady {
			b.Fatalf("allocate: %+v %v", obs, err)
		}
		refs = append(refs, ref)
	})
	for _, ref := range refs {
		if err := p.Release(ctx, ref); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRelease(b *testing.B) {
	p := newProvider(b)
	ctx := context.Background()
	refs := make([]sandbox.Ref, b.N)
	for i := range refs {
		refs[i] = ready(b, p, nil)
	}
	percentiles(b, func(i int) {
		if err := p.Release(ctx, refs[i]); err != nil {
			b.Fatal(err)
		}
	})
}

// cpuTime is the CPU this process and its waited-for children have used.
func cpuTime(b *testing.B) time.Duration {
	var total time.Duration
	for _, who := range []int{unix.RUSAGE_SELF, unix.RUSAGE_CHILDREN} {
		var ru unix.Rusage
		if err := unix.Getrusage(who, &ru); err != nil {
			b.Fatal(err)
		}
		total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return total
}

// benchObserve times Observe of one sandbox, paused or not, and reports the CPU each took, the
// runtime processes it started included: what a reconcile pass costs per sandbox.
func benchObserve(b *testing.B, paused bool) {
	p := newProvider(b)
	ref := ready(b, p, nil)
	ctx := context.Background()
	want := sandbox.ObservedReady
	if paused {
		if err := p.Pause(ctx, ref); err != nil {
			b.Fatal(err)
		}
		want = sandbox.ObservedPaused
	}
	cpu := cpuTime(b)
	percentiles(b, func(int) {
		if obs, err := p.Observe(ctx, ref); err != nil || obs.State != want {
			b.Fatalf("%+v %v", obs, err)
		}
	})
	b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}

// BenchmarkObserveReady: a running sandbox's agent answers; no runtime process is started.
func BenchmarkObserveReady(b *testing.B) { benchObserve(b, false) }

// BenchmarkObservePaused: a paused sandbox is looked at with `runc state`.
func BenchmarkObservePaused(b *testing.B) { benchObserve(b, true) }

func BenchmarkExecTrue(b *testing.B) {
	p := newProvider(b)
	ref := ready(b, p, nil)
	ctx := context.Background()
	cmd := sandbox.Command{Argv: []string{"true"}, Timeout: 10 * time.Second}
	percentiles(b, func(int) {
		if res, err := p.Exec(ctx, ref, cmd); err != nil || code(res) != 0 {
			b.Fatalf("%+v %v", res, err)
		}
	})
}

func BenchmarkWriteFile1MiB(b *testing.B) {
	p := newProvider(b)
	ref := ready(b, p, nil)
	data := make([]byte, 1<<20)
	b.SetBytes(int64(len(data)))
	percentiles(b, func(int) {
		if err := p.WriteFile(context.Background(), ref, "bench.bin", data); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkReadFile1MiB(b *testing.B) {
	p := newProvider(b)
	ref := ready(b, p, nil)
	if err := p.WriteFile(context.Background(), ref, "bench.bin", make([]byte, 1<<20)); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(1 << 20)
	percentiles(b, func(int) {
		if data, err := p.ReadFile(context.Background(), ref, "bench.bin"); err != nil || len(data) != 1<<20 {
			b.Fatal(err)
		}
	})
}

// BenchmarkRawRuncExec is `runc exec <id> true` (or `runsc exec`) on a container the provider made:
// the path exec does not take.
func BenchmarkRawRuncExec(b *testing.B) {
	dir := testenv.StateDir(b)
	p := newProviderAt(b, dir)
	ref := ready(b, p, nil)
	root := filepath.Join(dir, "runc")
	percentiles(b, func(int) {
		if out, err := exec.Command(testRuntime, "--root", root, "exec", ref.Name(), "true").CombinedOutput(); err != nil {
			b.Fatalf("%s exec: %v: %s", testRuntime, err, out)
		}
	})
}

// BenchmarkRawRuncRun is `runc run -d` of a bundle identical to the provider's (its own socket
// directory, overlay upper and cgroup), timed until runc returns; the container is removed untimed.
// It is runc's alone: gVisor's sandbox takes no socket as descriptor 3.
func BenchmarkRawRuncRun(b *testing.B) {
	dir := testenv.StateDir(b)
	p := newProviderAt(b, dir)
	if onGVisor(b, p) {
		b.Skip("runc's bundle")
	}
	ref := ready(b, p, nil)
	src := filepath.Join(dir, "sandboxes", ref.Name())
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		b.Fatal(err)
	}
	root := filepath.Join(dir, "raw-runc")
	var names []string
	b.Cleanup(func() {
		for _, n := range names {
			removeRaw(root, n)
		}
	})
	percentiles(b, func(i int) {
		b.StopTimer()
		name := fmt.Sprintf("raw-%d", i)
		bundle := filepath.Join(dir, "raw", name)
		var spec specs.Spec
		if err := json.Unmarshal(raw, &spec); err != nil {
			b.Fatal(err)
		}
		spec.Linux.CgroupsPath = "/sandboxd-bench-" + name
		for j, ns := range spec.Linux.Namespaces {
			if ns.Type == specs.UserNamespace {
				spec.Linux.Namespaces[j].Path = "" // the provider's holder is gone: runc makes one, as a caller of runc does
			}
		}
		for j, m := range spec.Mounts {
			switch m.Destination {
			case "/workspace":
				spec.Mounts[j].Source = filepath.Join(bundle, "upper")
			}
		}
		for _, d := range []string{"run", "upper"} {
			if err := os.MkdirAll(filepath.Join(bundle, d), 0o755); err != nil {
				b.Fatal(err)
			}
		}
		// The overlay's directories belong to the sandbox's root, as the provider lays them out.
		if ids := spec.Linux.UIDMappings; len(ids) > 0 {
			for _, d := range []string{"upper"} {
				if err := os.Chown(filepath.Join(bundle, d), int(ids[0].HostID), int(ids[0].HostID)); err != nil {
					b.Fatal(err)
				}
			}
		}
		out, _ := json.Marshal(&spec)
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), out, 0o600); err != nil {
			b.Fatal(err)
		}
		names = append(names, name)
		devnull, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		// The agent takes its listening socket as descriptor 3, as the provider hands it over.
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(bundle, "run", "agent.sock"), Net: "unix"})
		if err != nil {
			b.Fatal(err)
		}
		lnFile, err := ln.File()
		if err != nil {
			b.Fatal(err)
		}
		ln.SetUnlinkOnClose(false)
		ln.Close()
		filter, err := oci.SeccompFile() // descriptor 4: the agent's seccomp program
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command("runc", "--root", root, "run", "-d", "--preserve-fds", "2", "--bundle", bundle, name)
		cmd.Stdout, cmd.Stderr = devnull, devnull
		cmd.ExtraFiles = []*os.File{lnFile, filter}
		b.StartTimer()
		err = cmd.Run()
		b.StopTimer()
		devnull.Close()
		lnFile.Close()
		filter.Close()
		if err != nil {
			b.Fatalf("runc run: %v", err)
		}
		b.StartTimer()
	})
}

// removeRaw kills, reaps and deletes a container started by BenchmarkRawRuncRun, with its cgroups.
func removeRaw(root, name string) {
	out, err := exec.Command("runc", "--root", root, "state", name).Output()
	if err == nil {
		var st struct{ Pid int }
		if json.Unmarshal(out, &st) == nil && st.Pid > 0 {
			exec.Command("runc", "--root", root, "kill", name, "KILL").Run()
			var ws unix.WaitStatus
			for i := 0; i < 5000; i++ {
				if got, err := unix.Wait4(st.Pid, &ws, unix.WNOHANG, nil); got == st.Pid || err != nil {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	exec.Command("runc", "--root", root, "delete", "--force", name).Run()
	hier, _ := os.ReadDir("/sys/fs/cgroup")
	for _, h := range hier {
		unix.Rmdir(filepath.Join("/sys/fs/cgroup", h.Name(), "sandboxd-bench-"+name))
	}
}

// BenchmarkCreateWithVolume is a create-to-ready of a sandbox that mounts a volume (its host mount
// kept by a first sandbox, as when a volume is in use; an idmapped clone of it bound in), alternated
// with one of a sandbox without (the floor), both cold (no warm pool, no spares: a sandbox with a
// volume never takes a pool entry). It reports both medians and their ratio.
func BenchmarkCreateWithVolume(b *testing.B) {
	p := newProvider(b)
	ctx := context.Background()
	if _, err := p.CreateVolume(ctx, "bench", 64, true); err != nil {
		b.Fatal(err)
	}
	vol := sandbox.Spec{ClientRequestID: "bench", Extensions: map[string]json.RawMessage{
		sandbox.VolumesKey: json.RawMessage(`[{"name":"bench","mountPath":"/data"}]`)}}
	var refs []sandbox.Ref
	create := func(spec sandbox.Spec) time.Duration {
		ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
		start := time.Now()
		obs, err := p.Allocate(ctx, ref, spec)
		d := time.Since(start)
		if err != nil || obs.State != sandbox.ObservedReady {
			b.Fatalf("allocate: %+v %v", obs, err)
		}
		refs = append(refs, ref)
		return d
	}
	create(vol) // keeps the volume's host mount, as a volume in use has
	var bare, with []time.Duration
	for b.Loop() {
		bare = append(bare, create(sandbox.Spec{ClientRequestID: "bench"}))
		with = append(with, create(vol))
	}
	med := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	fb, fw := med(bare), med(with)
	b.ReportMetric(float64(fb.Microseconds())/1000, "bare-p50-ms")
	b.ReportMetric(float64(fw.Microseconds())/1000, "volume-p50-ms")
	b.ReportMetric(float64(fw)/float64(fb), "ratio")
	for _, ref := range refs {
		if err := p.Release(ctx, ref); err != nil {
			b.Fatal(err)
		}
	}
}
