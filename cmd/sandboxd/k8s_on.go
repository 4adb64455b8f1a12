//go:build kubernetes

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/provider/kubernetes"
)

func (k *K8sFlags) open(log *slog.Logger) (sandbox.Provider, error) {
	if k.DefaultImage == "" || k.AgentImage == "" {
		return nil, errors.New("the kubernetes provider needs --default-image and --agent-image")
	}
	cfg, err := kubernetes.RESTConfig(k.Kubeconfig)
	if err != nil {
		return nil, err
	}
	c := kubernetes.Config{
		REST:          cfg,
		Namespace:     k.Namespace,
		DefaultImage:  k.DefaultImage,
		AgentImage:    k.AgentImage,
		NetworkPolicy: k.NetworkPolicy,
		Instance:      k.Instance,
		Logger:        log,
		StorageClass:  k.StorageClass,
	}
	switch m := corev1.PersistentVolumeAccessMode(k.SharedMode); m {
	case corev1.ReadWriteMany, corev1.ReadWriteOnce:
		c.SharedAccessMode = m
	default:
		return nil, fmt.Errorf("--volume-shared-access-mode %q: want ReadWriteMany or ReadWriteOnce", k.SharedMode)
	}
	if k.PodTemplate != "" {
		if c.Template, err = kubernetes.LoadTemplate(k.PodTemplate); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return kubernetes.New(ctx, c)
}
