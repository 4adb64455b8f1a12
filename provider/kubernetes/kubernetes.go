// Package kubernetes is a sandbox provider that runs each sandbox generation as one Pod of a Kubernetes
// cluster. An init container copies the static sandboxd binary from a small agent image into a volume
// shared with the sandbox's own image; the main container runs the agent (`sandboxd agent`) as its
// process 1. Commands and files travel through the pods/exec subresource (WebSocket, with a SPDY
// fallback) to `sandboxd agent relay`, which joins the exec stream to the agent's unix socket, so the
// agent's HTTP protocol, its timeouts, output caps, cancellation and path confinement are the same as
// under the oci provider.
//
// Main invariant: the Pod of a generation is named from its (id, generation) and labelled with both, so
// an allocation is idempotent (an existing Pod is adopted, never duplicated), a restarted provider finds
// every Pod it made by label, and Release removes the Pod and everything made for it. Allocation (the Pod
// exists) and readiness (the agent inside answers) are separate: Allocate reports starting, and Observe
// reports ready only once the agent has answered.
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
	"github.com/sandboxd/sandbox/internal/version"
)

// Config configures a Provider. REST, DefaultImage and AgentImage are required.
type Config struct {
	REST         *rest.Config // how to reach the API server (see RESTConfig)
	Namespace    string       // where Pods are made; default "default"
	DefaultImage string       // the sandbox image when a spec names none
	AgentImage   string       // an image holding the static sandboxd binary as /sandboxd
	// Template supplies defaults for every Pod: labels, annotations, node selector, tolerations,
	// runtime class, security context, and for the container named "sandbox" (or the first one) its
	// resources, environment and image pull policy. The provider owns the name, namespace, restart
	// policy, command, volumes it adds, and the other containers are dropped.
	Template *corev1.Pod
	// NetworkPolicy says that the cluster's network plugin enforces NetworkPolicy objects (the API
	// server accepts them whether or not anything enforces them, so it cannot be detected). When set,
	// the provider gives each sandbox a NetworkPolicy that denies all ingress and writes its egress
	// policy (spec.extensions["sandboxd.network"], CIDR rules only; default deny), and claims the
	// networkPolicy capability.
	NetworkPolicy bool
	// StorageClass is the class of the volumes' PersistentVolumeClaims; empty: no volumes (the
	// persistentVolume capability is false).
	StorageClass string
	// SharedAccessMode is the access mode of a shared volume's claim; default ReadWriteMany. A
	// single-node cluster whose class offers ReadWriteOnce only may use that.
	SharedAccessMode corev1.PersistentVolumeAccessMode
	// MaxVolumeMiB bounds a volume's size; default 1 TiB.
	MaxVolumeMiB int64
	// Instance tells apart daemons that share a namespace: a provider sees and removes only the Pods
	// labelled with its instance. Default "default".
	Instance string
	Logger   *slog.Logger // default slog.Default()

	StopGrace   time.Duration // the Pod's termination grace period before a forced delete; default 2s
	CallTimeout time.Duration // bound of a file call, a health check or an API call; default 30s
	SyncTimeout time.Duration // how long New waits for the Pod informer's first listing; default 30s
}

// RESTConfig loads the API server configuration from a kubeconfig file, or from the in-cluster
// service account when path is empty and the process runs in a Pod, or from $KUBECONFIG and
// ~/.kube/config otherwise.
func RESTConfig(path string) (*rest.Config, error) {
	if path == "" {
		if cfg, err := rest.InClusterConfig(); err == nil {
			return cfg, nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes: load kubeconfig: %w", err)
	}
	return cfg, nil
}

// Provider runs sandboxes as Pods. It is safe for concurrent use. Close stops its informer.
type Provider struct {
	cfg  Config
	log  *slog.Logger
	cs   kubernetes.Interface
	rest *rest.Config

	pods     listersv1.PodLister
	stop     chan struct{}
	stopOnce sync.Once
	selector labels.Selector

	mu    sync.Mutex
	boxes map[sandbox.Ref]*box

	// volMu is held from the check of a volume's writers to the Pod's creation, and across a volume's
	// deletion, so that two allocations cannot both become its one writer.
	volMu sync.Mutex

	// DataPlane runs commands and file calls through each sandbox's agent over pods/exec (Exec,
	// ReadFile, WriteFile, ListFiles); its clients come from usable, so a Pod that does not run is
	// ErrProviderUnavailable.
	agentclient.DataPlane
}

var (
	_ sandbox.Provider   = (*Provider)(nil)
	_ sandbox.Executor   = (*Provider)(nil)
	_ sandbox.FileSystem = (*Provider)(nil)
)

// box is the provider's memory of one generation: the agent client and what it saw of the Pod.
type box struct {
	ref      sandbox.Ref
	name     string
	client   *agentclient.Client
	answered string // UID of the Pod whose agent has answered once
	seen     string // UID of the Pod last seen through the informer or the API
	deleted  bool   // the Pod disappeared while it was not being released
	release  bool   // a Release is under way or done
}

// New connects to the cluster, starts an informer on the provider's Pods and waits for its first
// listing. It finds, but does not touch, the Pods of an earlier provider with the same instance.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if cfg.REST == nil || cfg.DefaultImage == "" || cfg.AgentImage == "" {
		return nil, errors.New("kubernetes: REST, DefaultImage and AgentImage are required")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if cfg.Instance == "" {
		cfg.Instance = "default"
	}
	if errs := validLabelValue(cfg.Instance); errs != "" {
		return nil, fmt.Errorf("kubernetes: instance %q: %s", cfg.Instance, errs)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 2 * time.Second
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 30 * time.Second
	}
	if cfg.SyncTimeout <= 0 {
		cfg.SyncTimeout = 30 * time.Second
	}
	if cfg.SharedAccessMode == "" {
		cfg.SharedAccessMode = corev1.ReadWriteMany
	}
	if cfg.MaxVolumeMiB <= 0 {
		cfg.MaxVolumeMiB = defaultVolumeMiB
	}
	if cfg.Template != nil {
		cfg.Template = cfg.Template.DeepCopy()
	}
	rc := rest.CopyConfig(cfg.REST)
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 50, 100
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: client: %w", err)
	}
	p := &Provider{
		cfg:      cfg,
		log:      cfg.Logger.With("provider", "kubernetes", "namespace", cfg.Namespace),
		cs:       cs,
		rest:     rc,
		stop:     make(chan struct{}),
		selector: labels.SelectorFromSet(labels.Set{labelManagedBy: managedBy, labelInstance: cfg.Instance}),
		boxes:    make(map[sandbox.Ref]*box),
	}
	p.DataPlane = agentclient.DataPlane{Agents: agents{p}, ExecSlack: execSlack, CancelWait: cancelWait, CallTimeout: cfg.CallTimeout}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = p.selector.String() }))
	inf := factory.Core().V1().Pods()
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.onPod(obj, false) },
		UpdateFunc: func(_, obj any) { p.onPod(obj, false) },
		DeleteFunc: func(obj any) { p.onPod(obj, true) },
	}); err != nil {
		return nil, fmt.Errorf("kubernetes: informer: %w", err)
	}
	p.pods = inf.Lister()
	factory.Start(p.stop)
	sctx, cancel := context.WithTimeout(ctx, cfg.SyncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), inf.Informer().HasSynced) {
		p.Close()
		return nil, fmt.Errorf("kubernetes: no Pod listing from the API server within %v: %w", cfg.SyncTimeout, sandbox.ErrProviderUnavailable)
	}
	if cfg.StorageClass != "" {
		// A class that does not exist leaves every claim pending; one the daemon may not read is
		// taken on trust.
		_, err := cs.StorageV1().StorageClasses().Get(sctx, cfg.StorageClass, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			p.Close()
			return nil, fmt.Errorf("kubernetes: storage class %q does not exist", cfg.StorageClass)
		}
		if err != nil {
			p.log.Warn("cannot read the volumes' storage class", "class", cfg.StorageClass, "err", err)
		}
	}
	return p, nil
}

// Close stops the informer and drops the agents' idle connections. Pods are left as they are.
func (p *Provider) Close() error {
	p.stopOnce.Do(func() { close(p.stop) })
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.boxes {
		b.client.Close()
	}
	return nil
}

// Manifest describes the provider. pauseResume is false: Kubernetes has no way to freeze a Pod's
// processes and thaw them later (the kubelet offers no cgroup freezer, and deleting and recreating the
// Pod would lose its processes), so the provider does not pretend to. interactiveTerminal is true: the
// agent runs a process on a pseudo-terminal of its own and resizes it, as under oci, its calls
// relayed over pods/exec like any other (no pods/exec tty is involved). networkPolicy and
// persistentVolume are what the configuration says of the cluster (Config.NetworkPolicy,
// Config.StorageClass).
func (p *Provider) Manifest(context.Context) (sandbox.Manifest, error) {
	return sandbox.Manifest{
		Name:         "kubernetes",
		Version:      version.Version,
		RuntimeClass: p.runtimeClass(),
		Capabilities: sandbox.Capabilities{
			CommandExecution:    true,
			FileAccess:          true,
			ImageReference:      true,
			ResourceLimits:      true,
			InteractiveTerminal: true,
			NetworkPolicy:       p.cfg.NetworkPolicy,
			PersistentVolume:    p.cfg.StorageClass != "",
		},
	}, nil
}

// runtimeClass is the RuntimeClass of the template, or "default" (the nodes' default handler).
func (p *Provider) runtimeClass() string {
	if t := p.cfg.Template; t != nil && t.Spec.RuntimeClassName != nil && *t.Spec.RuntimeClassName != "" {
		return *t.Spec.RuntimeClassName
	}
	return "default"
}

// Resources lists, from the API server, every generation with a Pod labelled with this provider's
// instance, running or not, and every one with a NetworkPolicy left without its Pod.
func (p *Provider) Resources(ctx context.Context) ([]sandbox.Ref, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	list, err := p.cs.CoreV1().Pods(p.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: p.selector.String()})
	if err != nil {
		return nil, fmt.Errorf("kubernetes: list Pods: %v: %w", err, sandbox.ErrProviderUnavailable)
	}
	refs := make([]sandbox.Ref, 0, len(list.Items))
	for i := range list.Items {
		ref, ok := refOf(&list.Items[i])
		if !ok {
			p.log.Warn("Pod without a sandbox reference", "pod", list.Items[i].Name)
			continue
		}
		refs = append(refs, ref)
	}
	if p.cfg.NetworkPolicy {
		orphans, err := p.policyOrphans(ctx, refs)
		if err != nil {
			return nil, err
		}
		refs = append(refs, orphans...)
	}
	return refs, nil
}

// box returns the provider's memory of ref, making it on first use.
func (p *Provider) box(ref sandbox.Ref) *box {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.boxes[ref]
	if b == nil {
		b = &box{ref: ref, name: podName(ref)}
		b.client = agentclient.New(p.dialer(b.name))
		p.boxes[ref] = b
	}
	return b
}

// onPod keeps what the informer says of the provider's Pods: which Pod a generation has, and whether it
// disappeared without a Release.
func (p *Provider) onPod(obj any, deleted bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	ref, ok := refOf(pod)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.boxes[ref]
	if b == nil {
		return // a Pod this provider has not been asked about (yet)
	}
	if deleted {
		if !b.release && b.seen == string(pod.UID) {
			b.deleted = true
			p.log.Warn("sandbox Pod deleted behind the provider's back", "pod", pod.Name)
		}
		return
	}
	b.seen = string(pod.UID)
	b.deleted = false
}
