package kubernetes_test

import (
	"context"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/internal/testenv/corestack"
	"github.com/sandboxd/sandbox/store/sqlite"
)

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// daemon is a runtime core over a SQLite store and a kubernetes provider, like `sandboxd serve`.
type daemon struct {
	rt    *core.Runtime
	store *sqlite.Store
	stop  func()
}

// startDaemon starts a daemon whose store is in dir; its stop ends it as a crash would, releasing
// nothing.
func startDaemon(t *testing.T, dir, ns string) *daemon {
	t.Helper()
	p := newProviderIn(t, config(t, ns))
	s, err := corestack.Open(dir, p, corestack.Core(func(c *core.Config) { c.ReconcileInterval, c.ReadyTimeout = -1, 2*time.Minute }))
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{rt: s.Runtime, store: s.Store}
	d.stop = func() { s.Runtime.Close(); p.Close(); s.Store.Close() }
	t.Cleanup(d.stop)
	return d
}

func waitSandbox(t *testing.T, d *daemon, id sandbox.ID, want sandbox.State) *sandbox.Sandbox {
	t.Helper()
	var sb *sandbox.Sandbox
	waitFor(t, "sandbox "+string(id)+" "+string(want), func() (bool, string) {
		var err error
		if sb, err = d.rt.Reconcile(context.Background(), id); err != nil {
			return false, err.Error()
		}
		return sb.State == want, string(sb.State)
	})
	return sb
}

// TestRestart stops a daemon with sandboxes running, as a crash would (nothing released), then:
// deletes one sandbox's Pod behind its back and makes an orphan Pod. The restarted daemon adopts the
// running sandbox with its files, fails the one whose Pod is gone, and removes the orphan.
func TestRestart(t *testing.T) {
	ns := namespace(t)
	dir := t.TempDir()
	ctx := context.Background()
	d := startDaemon(t, dir, ns)
	var ids []sandbox.ID
	for i, key := range []string{"kept", "lost"} {
		sb, err := d.rt.Create(ctx, sandbox.Spec{ClientRequestID: key})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
		waitSandbox(t, d, sb.ID, sandbox.StateReady)
		if err := d.rt.WriteFile(ctx, sb.ID, 1, "note.txt", []byte(key)); err != nil {
			t.Fatalf("write in sandbox %d: %v", i, err)
		}
	}
	d.stop() // the daemon is gone; its Pods run on

	// An orphan: a Pod of a generation no store knows, made by a provider of the same instance.
	orphanP := newProviderIn(t, config(t, ns))
	orphan := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	if _, err := orphanP.Allocate(ctx, orphan, sandbox.Spec{ClientRequestID: "orphan"}); err != nil {
		t.Fatal(err)
	}
	orphanP.Close()
	lost := sandbox.Ref{ID: ids[1], Generation: 1}
	zero := int64(0)
	if err := clientset.CoreV1().Pods(ns).Delete(ctx, podOf(t, ns, lost).Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted Pod to go", func() (bool, string) {
		list, err := clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "sandboxd.io/id=" + string(lost.ID)})
		return err == nil && len(list.Items) == 0, "present"
	})

	d2 := startDaemon(t, dir, ns) // Start reconciles every sandbox and removes orphans
	kept := waitSandbox(t, d2, ids[0], sandbox.StateReady)
	if got, err := d2.rt.ReadFile(ctx, kept.ID, kept.Generation, "note.txt"); err != nil || string(got) != "kept" {
		t.Fatalf("file after restart: %q, %v", got, err)
	}
	res, err := d2.rt.Exec(ctx, kept.ID, kept.Generation, sandbox.Command{Argv: []string{"cat", "note.txt"}})
	if err != nil || res.Stdout != "kept" {
		t.Fatalf("exec after restart: %+v, %v", res, err)
	}
	failed := waitSandbox(t, d2, ids[1], sandbox.StateFailed)
	if failed.Failure == nil || failed.Failure.Code == "" {
		t.Fatalf("sandbox whose Pod was deleted: %+v", failed)
	}
	waitFor(t, "the orphan Pod to be removed", func() (bool, string) {
		list, err := clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "sandboxd.io/id=" + string(orphan.ID)})
		return err == nil && len(list.Items) == 0, "present"
	})
	for _, id := range ids {
		sb, err := d2.rt.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d2.rt.Terminate(ctx, id, sb.Generation); err != nil {
			t.Fatalf("terminate %s: %v", id, err)
		}
		waitSandbox(t, d2, id, sandbox.StateTerminated)
	}
}
