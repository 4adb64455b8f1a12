package httpapi

import (
	"net/http"

	"github.com/sandboxd/sandbox/api"
)

// volumeRoutes are the operations of persistent volumes.
func (s *Server) volumeRoutes() []route {
	return []route{
		{http.MethodGet, "/v1/volumes", s.listVolumes},
		{http.MethodPost, "/v1/volumes", s.createVolume},
		{http.MethodGet, "/v1/volumes/{volumeName}", s.getVolume},
		{http.MethodDelete, "/v1/volumes/{volumeName}", s.deleteVolume},
	}
}

// listVolumes: GET /v1/volumes.
func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request, _ []byte) error {
	list, err := s.rt.ListVolumes(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.VolumeList{Volumes: list})
	return nil
}

// createVolume: POST /v1/volumes.
func (s *Server) createVolume(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req api.VolumeCreate
	if err := decodeStrict(body, &req); err != nil {
		return err
	}
	v, err := s.rt.CreateVolume(r.Context(), req.Name, req.SizeMiB, req.Shared)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, v)
	return nil
}

// getVolume: GET /v1/volumes/{volumeName}.
func (s *Server) getVolume(w http.ResponseWriter, r *http.Request, _ []byte) error {
	v, err := s.rt.GetVolume(r.Context(), r.PathValue("volumeName"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// deleteVolume: DELETE /v1/volumes/{volumeName}.
func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request, _ []byte) error {
	if err := s.rt.DeleteVolume(r.Context(), r.PathValue("volumeName")); err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
	return nil
}
