package httpapi

import (
	"context"
	"net/http"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

type generationAction func(ctx context.Context, id sandbox.ID, gen sandbox.Generation) (*sandbox.Sandbox, error)

// action serves the actions whose body is only an expected generation.
func (s *Server) action(w http.ResponseWriter, r *http.Request, body []byte, do generationAction) error {
	var req api.GenerationRequest
	if err := decodeStrict(body, &req); err != nil {
		return err
	}
	sb, err := do(r.Context(), sandboxID(r), req.ExpectedGeneration)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}

// pauseSandbox: POST /v1/sandboxes/{sandboxId}/actions/pause.
func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request, body []byte) error {
	return s.action(w, r, body, s.rt.Pause)
}

// resumeSandbox: POST /v1/sandboxes/{sandboxId}/actions/resume.
func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request, body []byte) error {
	return s.action(w, r, body, s.rt.Resume)
}

// terminateSandbox: POST /v1/sandboxes/{sandboxId}/actions/terminate.
func (s *Server) terminateSandbox(w http.ResponseWriter, r *http.Request, body []byte) error {
	return s.action(w, r, body, s.rt.Terminate)
}

// recreateSandbox: POST /v1/sandboxes/{sandboxId}/actions/recreate.
func (s *Server) recreateSandbox(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req api.RecreateRequest
	if err := decodeStrict(body, &req); err != nil {
		return err
	}
	if err := checkSpec(req.Spec); err != nil {
		return err
	}
	if err := s.checkExtensions(req.Spec); err != nil {
		return err
	}
	sb, err := s.rt.Recreate(r.Context(), sandboxID(r), req.ExpectedGeneration, req.Spec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}

// reconcileSandbox: POST /v1/sandboxes/{sandboxId}/actions/reconcile. It takes no body; one sent is ignored.
func (s *Server) reconcileSandbox(w http.ResponseWriter, r *http.Request, _ []byte) error {
	sb, err := s.rt.Reconcile(r.Context(), sandboxID(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}
