package kubernetes_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/kubernetes"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The cluster tests run against the cluster of $KUBECONFIG (scripts/k8s/cluster.sh up makes one). Each
// test gets a namespace of its own. The agent image is $SANDBOXD_K8S_AGENT_IMAGE, or, when unset, one
// built here from this tree and imported with scripts/k8s/cluster.sh image-sandboxd. The sandbox image
// is $SANDBOXD_K8S_IMAGE (default local.test/busybox:1, which the cluster script preloads). Without a
// cluster the tests are skipped, except under CI=true, where a missing cluster fails them.

var (
	clusterOnce sync.Once
	clusterErr  error
	restCfg     *rest.Config
	clientset   *k8s.Clientset
	agentImage  string
)

func sandboxImage() string {
	if v := os.Getenv("SANDBOXD_K8S_IMAGE"); v != "" {
		return v
	}
	return "local.test/busybox:1"
}

// cluster returns the cluster's configuration, skipping the test when there is none (failing it under CI).
func cluster(t testing.TB) *rest.Config {
	t.Helper()
	clusterOnce.Do(func() { clusterErr = setupCluster() })
	if clusterErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs the kubernetes cluster: %v", clusterErr)
		}
		t.Skipf("no kubernetes cluster (%v): run scripts/k8s/cluster.sh build && scripts/k8s/cluster.sh up and set KUBECONFIG", clusterErr)
	}
	return restCfg
}

func setupCluster() error {
	path := os.Getenv("KUBECONFIG")
	if path == "" {
		return fmt.Errorf("KUBECONFIG is not set")
	}
	cfg, err := kubernetes.RESTConfig(path)
	if err != nil {
		return err
	}
	cs, err := k8s.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		return fmt.Errorf("API server: %w", err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		return fmt.Errorf("API server: %w", err)
	}
	restCfg, clientset = cfg, cs
	agentImage = os.Getenv("SANDBOXD_K8S_AGENT_IMAGE")
	if agentImage == "" {
		agentImage, err = importAgentImage()
	}
	return err
}

// importAgentImage builds a static sandboxd from this tree and imports it as an image named by its hash.
func importAgentImage() (string, error) {
	bin, err := testenv.Build()
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	tag := "local.test/sandboxd:" + hex.EncodeToString(sum[:6])
	imp := exec.Command("../../scripts/k8s/cluster.sh", "image-sandboxd", bin, tag)
	if out, err := imp.CombinedOutput(); err != nil {
		return "", fmt.Errorf("import the agent image: %v\n%s", err, out)
	}
	return tag, nil
}

// namespace makes a namespace for the test and deletes it (and every Pod left in it) at the end.
func namespace(t testing.TB) string {
	t.Helper()
	cluster(t)
	name := fmt.Sprintf("sbx-test-%d-%s", time.Now().UnixNano()%1e9, strings.ToLower(runtime.GOARCH))
	ctx := context.Background()
	if _, err := clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = clientset.CoreV1().Pods(name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		if err := clientset.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", name, err)
		}
	})
	// The namespace's default service account appears shortly after the namespace; Pods need it.
	for i := 0; ; i++ {
		if _, err := clientset.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return name
		} else if i > 300 {
			t.Fatalf("no default service account in %s: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// template is the Pod template of the tests: local images only.
func template() *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name:            "sandbox",
		ImagePullPolicy: corev1.PullNever,
	}}}}
}

func config(t testing.TB, ns string) kubernetes.Config {
	return kubernetes.Config{
		REST:         cluster(t),
		Namespace:    ns,
		DefaultImage: sandboxImage(),
		AgentImage:   agentImage,
		Template:     template(),
		StopGrace:    time.Second,
	}
}

func newProviderIn(t testing.TB, cfg kubernetes.Config) *kubernetes.Provider {
	t.Helper()
	p, err := kubernetes.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("new provider: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// newProvider is a provider in a fresh namespace.
func newProvider(t testing.TB) *kubernetes.Provider {
	return newProviderIn(t, config(t, namespace(t)))
}

// waitFor polls cond until it holds or a minute passes.
func waitFor(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %s", what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
