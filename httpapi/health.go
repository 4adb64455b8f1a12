package httpapi

import (
	"net/http"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

// getHealth: GET /healthz. It says the process accepts requests; it asks nothing of the provider.
func (s *Server) getHealth(w http.ResponseWriter, _ *http.Request, _ []byte) error {
	writeJSON(w, http.StatusOK, api.Health{Status: "ok"})
	return nil
}

// getRuntimeInfo: GET /v1/runtime.
func (s *Server) getRuntimeInfo(w http.ResponseWriter, r *http.Request, _ []byte) error {
	m, err := s.rt.Manifest(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.RuntimeInfo{ProtocolVersion: sandbox.ProtocolVersion, Provider: m})
	return nil
}
