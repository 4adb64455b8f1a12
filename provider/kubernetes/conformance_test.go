package kubernetes_test

import (
	"context"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/httpapi/apitest"
	"github.com/sandboxd/sandbox/provider/providertest"
)

// TestConformance runs the provider conformance suite against Pods on the cluster.
func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) sandbox.Provider { return newProvider(t) })
}

// TestHTTPSuite runs the whole HTTP conformance suite over Pods on the cluster.
func TestHTTPSuite(t *testing.T) {
	apitest.Run(t, func(t *testing.T) sandbox.Provider { return newProvider(t) })
}

// TestManifest checks the capabilities claimed: interactive terminals, no pause, network policy only
// when configured, and the runtime class of the template.
func TestManifest(t *testing.T) {
	ns := namespace(t)
	m, err := newProviderIn(t, config(t, ns)).Manifest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := m.Capabilities
	if m.Name != "kubernetes" || m.RuntimeClass != "default" || !c.CommandExecution || !c.FileAccess ||
		!c.ImageReference || !c.ResourceLimits || !c.InteractiveTerminal || c.PauseResume || c.NetworkPolicy {
		t.Fatalf("manifest %+v", m)
	}
	cfg := config(t, ns)
	cfg.NetworkPolicy = true
	rc := "gvisor"
	cfg.Template.Spec.RuntimeClassName = &rc
	cfg.Instance = "other"
	m, err = newProviderIn(t, cfg).Manifest(context.Background())
	if err != nil || m.RuntimeClass != "gvisor" || !m.Capabilities.NetworkPolicy {
		t.Fatalf("manifest with a runtime class and network policy: %+v, %v", m, err)
	}
}
