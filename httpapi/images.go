package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/sandboxd/sandbox"
)

// imageRoutes are the operations of the provider's images (api/extensions.yaml, "images and templates").
func (s *Server) imageRoutes() []route {
	return []route{
		{http.MethodGet, "/v1/images", s.listImages},
		{http.MethodPost, "/v1/images/pull", s.pullImage},
		{http.MethodPost, "/v1/images/import", s.importImage},
		{http.MethodPost, "/v1/images/remove", s.removeImage},
		{http.MethodPost, "/v1/images/prune", s.pruneImages},
		{http.MethodGet, "/v1/images/digest/{digest}", s.getImage},
	}
}

// listImages: GET /v1/images.
func (s *Server) listImages(w http.ResponseWriter, r *http.Request, _ []byte) error {
	list, err := s.rt.Images(r.Context())
	if err != nil {
		return err
	}
	if list == nil {
		list = []sandbox.ImageInfo{}
	}
	writeJSON(w, http.StatusOK, struct {
		Images []sandbox.ImageInfo `json:"images"`
	}{list})
	return nil
}

// decodeBody decodes a body the document has validated already.
func decodeBody(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("request body: %v: %w", err, sandbox.ErrInvalidRequest)
	}
	return nil
}

// pullImage: POST /v1/images/pull.
func (s *Server) pullImage(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req struct {
		Reference string `json:"reference"`
	}
	if err := decodeBody(body, &req); err != nil {
		return err
	}
	info, err := s.rt.PullImage(r.Context(), req.Reference)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

// importImage: POST /v1/images/import.
func (s *Server) importImage(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req struct {
		Path string `json:"path"`
		Name string `json:"name"`
	}
	if err := decodeBody(body, &req); err != nil {
		return err
	}
	info, err := s.rt.ImportImage(r.Context(), req.Path, req.Name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

// removeImage: POST /v1/images/remove.
func (s *Server) removeImage(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req struct {
		Reference string `json:"reference"`
	}
	if err := decodeBody(body, &req); err != nil {
		return err
	}
	// The answer is the request: what was removed.
	if err := s.rt.RemoveImage(r.Context(), req.Reference); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, req)
	return nil
}

// pruneImages: POST /v1/images/prune.
func (s *Server) pruneImages(w http.ResponseWriter, r *http.Request, _ []byte) error {
	n, err := s.rt.PruneImages(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, struct {
		LayersRemoved int `json:"layersRemoved"`
	}{n})
	return nil
}

// getImage: GET /v1/images/digest/{digest}.
func (s *Server) getImage(w http.ResponseWriter, r *http.Request, _ []byte) error {
	info, err := s.rt.Image(r.Context(), r.PathValue("digest"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}
