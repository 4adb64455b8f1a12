package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/sandboxd/sandbox"
)

// networkRoutes are the network group's operations (api/extensions.yaml).
func (s *Server) networkRoutes() []route {
	return []route{
		{http.MethodGet, "/v1/sandboxes/{sandboxId}/network", s.getNetwork},
		{http.MethodPut, "/v1/sandboxes/{sandboxId}/network", s.setNetwork},
		{http.MethodGet, "/v1/sandboxes/{sandboxId}/network/denials", s.streamDenials},
	}
}

// networkStatus is the NetworkStatus schema.
type networkStatus struct {
	Generation sandbox.Generation `json:"generation"`
	sandbox.NetworkStatus
}

// getNetwork: GET /v1/sandboxes/{sandboxId}/network.
func (s *Server) getNetwork(w http.ResponseWriter, r *http.Request, _ []byte) error {
	st, gen, err := s.rt.Network(r.Context(), sandboxID(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, networkStatus{Generation: gen, NetworkStatus: st})
	return nil
}

// setNetwork: PUT /v1/sandboxes/{sandboxId}/network.
func (s *Server) setNetwork(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req struct {
		ExpectedGeneration sandbox.Generation `json:"expectedGeneration"`
		Policy             json.RawMessage    `json:"policy"`
	}
	if err := decodeStrict(body, &req); err != nil {
		return err
	}
	st, err := s.rt.SetNetwork(r.Context(), sandboxID(r), req.ExpectedGeneration, req.Policy)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, networkStatus{Generation: req.ExpectedGeneration, NetworkStatus: st})
	return nil
}
