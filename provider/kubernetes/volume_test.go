package kubernetes_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/provider/kubernetes"
)

// testStorageClass is the test cluster's class (scripts/k8s/cluster.sh): the controller-manager's
// hostPath provisioner, one directory on the node per claim.
const testStorageClass = "hostpath"

func volumeConfig(t *testing.T, ns string) kubernetes.Config {
	cfg := config(t, ns)
	cfg.StorageClass = testStorageClass
	return cfg
}

func mountSpec(mounts string) sandbox.Spec { return withExtension(sandbox.VolumesKey, mounts) }

// execOut runs argv in sb and returns its stdout and exit code.
func execOut(t *testing.T, c *client.Client, sb *sandbox.Sandbox, argv ...string) (string, int) {
	t.Helper()
	res, err := c.Exec(context.Background(), sb.ID, sb.Generation, sandbox.Command{Argv: argv})
	if err != nil || res.ExitCode == nil {
		t.Fatalf("exec %v in %s: %+v, %v", argv, sb.ID, res, err)
	}
	return res.Stdout, *res.ExitCode
}

// TestVolumes: a volume is a claim of the configured class, of its size; a sandbox mounts it where
// its spec says; a second writer of a volume that is not shared fails (volume_in_use) while a reader
// mounts it read-only; a shared volume takes two writers; the data outlives terminate, recreate and
// a daemon restart; a volume is not deleted while mounted, and goes with its claim.
func TestVolumes(t *testing.T) {
	ns := namespace(t)
	cfg := volumeConfig(t, ns)
	dir := t.TempDir()
	c, stop := apiStack(t, dir, cfg)
	ctx := context.Background()

	m, err := newProviderIn(t, cfg).Manifest(ctx)
	if err != nil || !m.Capabilities.PersistentVolume {
		t.Fatalf("manifest %+v, %v: want persistentVolume", m, err)
	}
	v, err := c.CreateVolume(ctx, "work_data", 64, false)
	if err != nil || v.Name != "work_data" || v.SizeMiB != 64 || v.Shared || len(v.AttachedTo) != 0 {
		t.Fatalf("create volume: %+v, %v", v, err)
	}
	if _, err := c.CreateVolume(ctx, "work_data", 64, false); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("create it again: %v", err)
	}
	if _, err := c.CreateVolume(ctx, "too-small", 1, false); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("a 1 MiB volume: %v", err)
	}
	if _, err := c.CreateVolume(ctx, "both", 16, true); err != nil {
		t.Fatal(err)
	}
	claims, err := clientset.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(claims.Items) != 2 {
		t.Fatalf("claims: %+v, %v", claims, err)
	}
	for _, pvc := range claims.Items {
		want := map[string]struct {
			size string
			mode corev1.PersistentVolumeAccessMode
		}{"work_data": {"64Mi", corev1.ReadWriteOnce}, "both": {"16Mi", corev1.ReadWriteMany}}[pvc.Annotations["sandboxd.io/volume"]]
		got := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		if got.Cmp(resource.MustParse(want.size)) != 0 || *pvc.Spec.StorageClassName != testStorageClass ||
			!slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{want.mode}) {
			t.Errorf("claim %s: %s %v %v", pvc.Name, got.String(), *pvc.Spec.StorageClassName, pvc.Spec.AccessModes)
		}
	}
	if _, err := c.Create(ctx, mountSpec(`[{"name":"nope","mountPath":"/data"}]`)); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("a sandbox mounting a volume that does not exist: %v", err)
	}

	writer := create(t, c, mountSpec(`[{"name":"work_data","mountPath":"/data"},{"name":"both","mountPath":"/workspace/both"}]`))
	if _, code := execOut(t, c, writer, "sh", "-c", "echo kept > /data/note && echo a > /workspace/both/a"); code != 0 {
		t.Fatalf("write to the volume: exit %d", code)
	}
	second, err := c.Create(ctx, mountSpec(`[{"name":"work_data","mountPath":"/data"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.WaitState(ctx, second.ID, sandbox.StateReady); err == nil || got == nil || got.Failure == nil || got.Failure.Code != "volume_in_use" {
		t.Fatalf("a second writer: %+v, %v; want failed with volume_in_use", got, err)
	}
	reader := create(t, c, mountSpec(`[{"name":"work_data","mountPath":"/data","readOnly":true},{"name":"both","mountPath":"/srv/both"}]`))
	if out, code := execOut(t, c, reader, "cat", "/data/note"); code != 0 || out != "kept\n" {
		t.Fatalf("read in the reader: %q, exit %d", out, code)
	}
	if _, code := execOut(t, c, reader, "sh", "-c", "echo x > /data/other"); code == 0 {
		t.Fatal("a read-only mount took a write")
	}
	if _, code := execOut(t, c, reader, "sh", "-c", "echo b > /srv/both/b"); code != 0 {
		t.Fatal("a second writer of a shared volume was refused")
	}
	if err := c.DeleteVolume(ctx, "work_data"); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("delete while mounted: %v", err)
	}
	if got, err := c.Volume(ctx, "work_data"); err != nil || !slices.Contains(got.AttachedTo, writer.ID) || !slices.Contains(got.AttachedTo, reader.ID) {
		t.Fatalf("volume while mounted: %+v, %v", got, err)
	}

	// Terminate, recreate: the data is there.
	for _, sb := range []*sandbox.Sandbox{second, reader} {
		if _, err := c.Terminate(ctx, sb.ID, 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Terminate(ctx, writer.ID, writer.Generation); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitState(ctx, writer.ID, sandbox.StateTerminated); err != nil {
		t.Fatal(err)
	}
	again, err := c.Recreate(ctx, writer.ID, writer.Generation, mountSpec(`[{"name":"work_data","mountPath":"/mnt/data"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if again, err = c.WaitState(ctx, again.ID, sandbox.StateReady); err != nil {
		t.Fatal(err)
	}
	if out, code := execOut(t, c, again, "cat", "/mnt/data/note"); code != 0 || out != "kept\n" {
		t.Fatalf("after recreate: %q, exit %d", out, code)
	}

	// A daemon restart (nothing released): the volumes and the mount are where they were.
	stop()
	c, _ = apiStack(t, dir, cfg)
	if list, err := c.Volumes(ctx); err != nil || len(list) != 2 || list[0].Name != "both" || list[1].Name != "work_data" {
		t.Fatalf("volumes after restart: %+v, %v", list, err)
	}
	if _, code := execOut(t, c, again, "sh", "-c", "cat /mnt/data/note && echo more >> /mnt/data/note"); code != 0 {
		t.Fatalf("the volume after restart: exit %d", code)
	}
	if _, err := c.Terminate(ctx, again.ID, again.Generation); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitState(ctx, again.ID, sandbox.StateTerminated); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"work_data", "both"} {
		if err := c.DeleteVolume(ctx, name); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
		if _, err := c.Volume(ctx, name); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("%s after delete: %v", name, err)
		}
	}
	if list, err := clientset.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Fatalf("claims after delete: %d, %v", len(list.Items), err)
	}
}

// TestVolumesNeedAClass: without a storage class the provider keeps no volumes and says so.
func TestVolumesNeedAClass(t *testing.T) {
	ns := namespace(t)
	c, _ := apiStack(t, t.TempDir(), config(t, ns))
	ctx := context.Background()
	if _, err := c.CreateVolume(ctx, "v", 16, false); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
		t.Fatalf("create a volume: %v", err)
	}
	if _, err := c.Create(ctx, mountSpec(`[{"name":"v","mountPath":"/data"}]`)); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
		t.Fatalf("a sandbox with a volume: %v", err)
	}
	cfg := config(t, ns)
	cfg.StorageClass = "no-such-class"
	cfg.Instance = "other"
	if _, err := kubernetes.New(ctx, cfg); err == nil {
		t.Fatal("a storage class that does not exist was taken")
	}
}
