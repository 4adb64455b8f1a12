package api

import (
	"bytes"
	"os"
	"testing"
)

// TestSpecIsTheContract keeps the embedded copy equal to the contract beside the checkout, when it is there.
func TestSpecIsTheContract(t *testing.T) {
	want, err := os.ReadFile("../../shared/spec/openapi.yaml")
	if os.IsNotExist(err) {
		t.Skip("no contract beside the checkout")
	}
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(OpenAPI, want) {
		t.Fatal("api/openapi.yaml differs from ../shared/spec/openapi.yaml: copy the contract again")
	}
}
