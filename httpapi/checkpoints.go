package httpapi

import (
	"net/http"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

// checkpointRoutes are the memory snapshot group's operations (api/extensions.yaml).
func (s *Server) checkpointRoutes() []route {
	return []route{
		{http.MethodPost, "/v1/sandboxes/{sandboxId}/actions/checkpoint", s.checkpoint},
		{http.MethodGet, "/v1/sandboxes/{sandboxId}/checkpoints", s.listCheckpoints},
	}
}

// checkpoint: POST /v1/sandboxes/{sandboxId}/actions/checkpoint.
func (s *Server) checkpoint(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req api.CheckpointRequest
	if err := decodeStrict(body, &req); err != nil {
		return err
	}
	sb, c, err := s.rt.Checkpoint(r.Context(), sandboxID(r), req.ExpectedGeneration, req.LeaveRunning)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.CheckpointResult{Checkpoint: c, State: sb.State})
	return nil
}

// listCheckpoints: GET /v1/sandboxes/{sandboxId}/checkpoints.
func (s *Server) listCheckpoints(w http.ResponseWriter, r *http.Request, _ []byte) error {
	list, err := s.rt.Checkpoints(r.Context(), sandboxID(r))
	if err != nil {
		return err
	}
	if list == nil {
		list = []sandbox.Checkpoint{}
	}
	writeJSON(w, http.StatusOK, api.CheckpointList{Checkpoints: list})
	return nil
}
