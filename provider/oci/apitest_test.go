package oci_test

import (
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/httpapi/apitest"
)

// TestHTTPSuite runs the whole HTTP conformance suite over real runc containers.
func TestHTTPSuite(t *testing.T) {
	apitest.Run(t, func(t *testing.T) sandbox.Provider { return newProvider(t) })
}
