package httpapi

import (
	"net/http"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

// createSandbox: POST /v1/sandboxes. A repeated create with the same clientRequestId and spec answers 201
// with the sandbox as it is now, like the first one: the contract has a single success status for both.
func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request, body []byte) error {
	var spec sandbox.Spec
	if err := decodeStrict(body, &spec); err != nil {
		return err
	}
	if err := checkSpec(spec); err != nil {
		return err
	}
	if err := s.checkExtensions(spec); err != nil {
		return err
	}
	sb, err := s.rt.Create(r.Context(), spec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, sb)
	return nil
}

// listSandboxes: GET /v1/sandboxes.
func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request, _ []byte) error {
	list, err := s.rt.List(r.Context())
	if err != nil {
		return err
	}
	if list == nil {
		list = []*sandbox.Sandbox{}
	}
	writeJSON(w, http.StatusOK, api.SandboxList{Sandboxes: list})
	return nil
}

// getSandbox: GET /v1/sandboxes/{sandboxId}.
func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request, _ []byte) error {
	sb, err := s.rt.Get(r.Context(), sandboxID(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}
