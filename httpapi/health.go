package httpapi

import (
	"net/http"

	"github.com/sandboxd/sandbox"
)

// Health is the body of GET /healthz.
type Health struct {
	Status string `json:"status"`
}

// RuntimeInfo is the body of GET /v1/runtime.
type RuntimeInfo struct {
	ProtocolVersion string           `json:"protocolVersion"`
	Provider        sandbox.Manifest `json:"provider"`
}

// getHealth: GET /healthz. It says the process accepts requests; it asks nothing of the provider.
func (s *Server) getHealth(w http.ResponseWriter, _ *http.Request, _ []byte) error {
	writeJSON(w, http.StatusOK, Health{Status: "ok"})
	return nil
}

// getRuntimeInfo: GET /v1/runtime.
func (s *Server) getRuntimeInfo(w http.ResponseWriter, r *http.Request, _ []byte) error {
	m, err := s.rt.Manifest(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, RuntimeInfo{ProtocolVersion: sandbox.ProtocolVersion, Provider: m})
	return nil
}
