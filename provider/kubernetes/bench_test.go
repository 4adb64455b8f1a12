package kubernetes_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
)

// The benchmarks measure, on the same cluster and in the same run, what the provider does beside what
// kubectl does with the same image: create-to-ready (a Pod made and its agent answering, against
// `kubectl run` and `kubectl wait --for=condition=Ready`) and an exec round trip (a command through the
// agent over pods/exec, against `kubectl exec`). kubectl is $KUBECTL, else the one on PATH
// (scripts/k8s/cluster.sh builds it from the same Kubernetes version as the cluster). Each reports p50
// and p99 in milliseconds beside ns/op.

func report(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(ds[len(ds)/2]), "p50-ms")
	b.ReportMetric(ms(ds[min(len(ds)-1, len(ds)*99/100)]), "p99-ms")
}

func kubectl(b *testing.B, args ...string) {
	b.Helper()
	bin := os.Getenv("KUBECTL")
	if bin == "" {
		bin = "kubectl"
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		b.Fatalf("kubectl %v: %v\n%s", args, err, out)
	}
}

func BenchmarkCreateToReady(b *testing.B) {
	createToReady(b, newProvider(b), sandbox.Spec{})
}

// BenchmarkCreateToReadyExtensions is create-to-ready of a plain sandbox of a provider without
// NetworkPolicy (the floor), then, on one with, a sandbox with an egress policy (its NetworkPolicy made
// before the Pod and owned by it after) and one mounting a volume (a bound claim of the test cluster's
// hostpath class, and the deny-all policy), in the same run.
func BenchmarkCreateToReadyExtensions(b *testing.B) {
	ns := namespace(b)
	plain := newProviderIn(b, config(b, ns))
	cfg := config(b, ns)
	cfg.NetworkPolicy, cfg.StorageClass, cfg.Instance = true, testStorageClass, "ext"
	p := newProviderIn(b, cfg)
	if _, err := p.CreateVolume(context.Background(), "bench", 16, false); err != nil {
		b.Fatal(err)
	}
	b.Run("plain", func(b *testing.B) { createToReady(b, plain, sandbox.Spec{}) })
	b.Run("networkPolicy", func(b *testing.B) {
		createToReady(b, p, withExtension("sandboxd.network", `{"allow":["203.0.113.0/24"],"deny":["203.0.113.9"]}`))
	})
	b.Run("volume", func(b *testing.B) {
		createToReady(b, p, withExtension(sandbox.VolumesKey, `[{"name":"bench","mountPath":"/data"}]`))
	})
}

func createToReady(b *testing.B, p sandbox.Provider, spec sandbox.Spec) {
	ctx := context.Background()
	var ds []time.Duration
	for i := 0; i < b.N; i++ {
		ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
		start := time.Now()
		spec.ClientRequestID = ref.Name()
		if _, err := p.Allocate(ctx, ref, spec); err != nil {
			b.Fatal(err)
		}
		for {
			obs, err := p.Observe(ctx, ref)
			if err != nil {
				b.Fatal(err)
			}
			if obs.State == sandbox.ObservedReady {
				break
			}
			if obs.State == sandbox.ObservedFailed || time.Since(start) > 2*time.Minute {
				b.Fatalf("%s: %+v", ref, obs)
			}
			time.Sleep(10 * time.Millisecond)
		}
		ds = append(ds, time.Since(start))
		b.StopTimer()
		if err := p.Release(ctx, ref); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	report(b, ds)
}

func BenchmarkKubectlRunToReady(b *testing.B) {
	ns := namespace(b)
	var ds []time.Duration
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("kubectl-run-%d", i)
		start := time.Now()
		kubectl(b, "-n", ns, "run", name, "--image="+sandboxImage(), "--image-pull-policy=Never", "--restart=Never", "--", "sleep", "3600")
		kubectl(b, "-n", ns, "wait", "--for=condition=Ready", "pod/"+name, "--timeout=120s")
		ds = append(ds, time.Since(start))
		b.StopTimer()
		kubectl(b, "-n", ns, "delete", "pod", name, "--grace-period=1", "--wait=true")
		b.StartTimer()
	}
	report(b, ds)
}

func BenchmarkExec(b *testing.B) {
	p := newProvider(b)
	ctx := context.Background()
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	if _, err := p.Allocate(ctx, ref, sandbox.Spec{ClientRequestID: "bench-exec"}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Release(ctx, ref) })
	waitObserved(b, p, ref, sandbox.ObservedReady)
	cmd := sandbox.Command{Argv: []string{"true"}}
	if _, err := p.Exec(ctx, ref, cmd); err != nil { // the first stream is opened outside the timing
		b.Fatal(err)
	}
	b.ResetTimer()
	ds := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		start := time.Now()
		res, err := p.Exec(ctx, ref, cmd)
		if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
			b.Fatalf("exec: %+v, %v", res, err)
		}
		ds = append(ds, time.Since(start))
	}
	report(b, ds)
}

func BenchmarkKubectlExec(b *testing.B) {
	ns := namespace(b)
	kubectl(b, "-n", ns, "run", "kubectl-exec", "--image="+sandboxImage(), "--image-pull-policy=Never", "--restart=Never", "--", "sleep", "3600")
	kubectl(b, "-n", ns, "wait", "--for=condition=Ready", "pod/kubectl-exec", "--timeout=120s")
	b.ResetTimer()
	ds := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		start := time.Now()
		kubectl(b, "-n", ns, "exec", "kubectl-exec", "--", "true")
		ds = append(ds, time.Since(start))
	}
	report(b, ds)
}
