//go:build !kubernetes

package main

import (
	"errors"
	"log/slog"

	"github.com/sandboxd/sandbox"
)

func (k *K8sFlags) open(*slog.Logger) (sandbox.Provider, error) {
	return nil, errors.New("this sandboxd is built without the kubernetes provider: build it with -tags kubernetes")
}
