package main

// The kubernetes provider is built in only with the build tag "kubernetes" (k8s_on.go): client-go's package
// initialisation costs milliseconds at every process start, and this binary also starts as the agent
// inside every oci sandbox. The flags exist in every build, so scripts and units stay the same.

import "flag"

// K8sFlags are the settings of the kubernetes provider.
type K8sFlags struct {
	Kubeconfig    string // empty: in-cluster, else $KUBECONFIG or ~/.kube/config
	Namespace     string
	DefaultImage  string
	AgentImage    string
	PodTemplate   string // a YAML or JSON v1 Pod file of defaults
	NetworkPolicy bool
	Instance      string
	StorageClass  string // the volumes' claims' class; empty: no volumes
	SharedMode    string // access mode of a shared volume's claim
}

func (k *K8sFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.Kubeconfig, "kubeconfig", k.Kubeconfig, "kubernetes provider: kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&k.Namespace, "namespace", "default", "kubernetes provider: namespace of the sandboxes' Pods")
	fs.StringVar(&k.DefaultImage, "default-image", k.DefaultImage, "kubernetes provider: image of a sandbox whose spec names none")
	fs.StringVar(&k.AgentImage, "agent-image", k.AgentImage, "kubernetes provider: image holding this static sandboxd binary as /sandboxd")
	fs.StringVar(&k.PodTemplate, "pod-template", k.PodTemplate, "kubernetes provider: YAML or JSON Pod whose spec supplies defaults (resources, node selector, tolerations, pull policy, runtime class)")
	fs.BoolVar(&k.NetworkPolicy, "network-policy", k.NetworkPolicy, "kubernetes provider: the cluster enforces NetworkPolicy; isolate each sandbox with one and claim the capability")
	fs.StringVar(&k.Instance, "instance", "default", "kubernetes provider: label value telling apart daemons that share a namespace")
	fs.StringVar(&k.StorageClass, "volume-storage-class", k.StorageClass, "kubernetes provider: storage class of the volumes' PersistentVolumeClaims (default: no volumes)")
	fs.StringVar(&k.SharedMode, "volume-shared-access-mode", "ReadWriteMany", "kubernetes provider: access mode of a shared volume's claim (ReadWriteMany, or ReadWriteOnce on a single node)")
}
