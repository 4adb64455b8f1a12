//go:build kubernetes

package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/kubernetes"
)

// TestKubernetesSandboxesSurviveDaemonSIGKILL runs a daemon built with -tags kubernetes against the cluster
// of $KUBECONFIG, kills it with SIGKILL while sandboxes run, deletes one sandbox's Pod and makes an orphan
// Pod behind its back, and restarts it: the running sandbox is ready with its file, the one whose Pod went
// is failed with a reason, and the orphan Pod is removed. scripts/test brings the cluster up and sets
// KUBECONFIG, KUBECTL and SANDBOXD_K8S_AGENT_IMAGE.
func TestKubernetesSandboxesSurviveDaemonSIGKILL(t *testing.T) {
	kubeconfig, kubectl, agentImage := os.Getenv("KUBECONFIG"), os.Getenv("KUBECTL"), os.Getenv("SANDBOXD_K8S_AGENT_IMAGE")
	if kubeconfig == "" || kubectl == "" || agentImage == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI needs the kubernetes cluster: KUBECONFIG, KUBECTL and SANDBOXD_K8S_AGENT_IMAGE must be set")
		}
		t.Skip("no kubernetes cluster: run scripts/test, or set KUBECONFIG, KUBECTL and SANDBOXD_K8S_AGENT_IMAGE")
	}
	ctx := context.Background()
	bin := testenv.BuildDaemon(t, "kubernetes")
	ns := fmt.Sprintf("sbx-restart-%d", time.Now().UnixNano()%1_000_000)
	kc := func(args ...string) string {
		out, err := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			t.Logf("kubectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	kc("create", "namespace", ns)
	t.Cleanup(func() { kc("delete", "namespace", ns, "--wait=false") })

	dataDir := t.TempDir()
	flags := []string{"--provider", "kubernetes", "--kubeconfig", kubeconfig, "--namespace", ns,
		"--default-image", "local.test/busybox:1", "--agent-image", agentImage, "--instance", "restart"}
	d := startDaemonBin(t, bin, dataDir, flags...)
	mk := func(key string) sandbox.Sandbox {
		var sb sandbox.Sandbox
		if st := call(ctx, "POST", d.url+"/v1/sandboxes", map[string]any{"clientRequestId": key}, &sb); st != 201 {
			t.Fatalf("create %s: %d", key, st)
		}
		return waitForWithin(t, d.url, sb.ID, sandbox.StateReady, 2*time.Minute)
	}
	kept, vanished := mk("kept"), mk("vanished")
	put := fmt.Sprintf("%s/v1/sandboxes/%s/files/content", d.url, kept.ID)
	if st := call(ctx, "PUT", put, map[string]any{"expectedGeneration": 1, "path": "state.txt",
		"contentBase64": base64.StdEncoding.EncodeToString([]byte("kept across a crash"))}, nil); st != 200 {
		t.Fatalf("write: %d", st)
	}

	d.kill()
	kc("delete", "pods", "-n", ns, "-l", "sandboxd.io/id="+string(vanished.ID), "--grace-period=0", "--force", "--wait=true")
	// An orphan: a Pod of this instance that belongs to no sandbox the daemon knows.
	rest, err := kubernetes.RESTConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	other, err := kubernetes.New(ctx, kubernetes.Config{REST: rest, Namespace: ns, DefaultImage: "local.test/busybox:1",
		AgentImage: agentImage, Instance: "restart"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	orphan := sandbox.Ref{ID: "sbx_orphanorphanorphan00", Generation: 1}
	if _, err := other.Allocate(ctx, orphan, sandbox.Spec{ClientRequestID: "orphan"}); err != nil {
		t.Fatal(err)
	}

	d = startDaemonBin(t, bin, dataDir, flags...)
	t.Cleanup(func() {
		for _, sb := range []sandbox.Sandbox{kept, vanished} {
			call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/actions/terminate", d.url, sb.ID), map[string]any{"expectedGeneration": 1}, nil)
		}
	})
	got := waitForWithin(t, d.url, kept.ID, sandbox.StateReady, time.Minute)
	if got.Generation != 1 {
		t.Fatalf("kept sandbox after restart: %+v", got)
	}
	var res sandbox.CommandResult
	if st := call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/commands", d.url, kept.ID),
		map[string]any{"expectedGeneration": 1, "argv": []string{"cat", "state.txt"}}, &res); st != 200 || res.Stdout != "kept across a crash" {
		t.Fatalf("exec after restart: %d %+v", st, res)
	}
	failed := waitForWithin(t, d.url, vanished.ID, sandbox.StateFailed, time.Minute)
	if failed.Failure == nil || failed.Failure.Code == "" {
		t.Fatalf("sandbox whose Pod was deleted failed without a reason: %+v", failed)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		out := kc("get", "pods", "-n", ns, "-l", "sandboxd.io/id="+string(orphan.ID), "-o", "name")
		if strings.TrimSpace(out) == "" || strings.Contains(out, "No resources") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the orphan Pod is still there a minute after the restart:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
