package httpapi

import (
	"net/http"
	"os"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/core"
)

// snapshotRoutes are the operations of snapshots, forks and templates (api/extensions.yaml, "images
// and templates" and "snapshots").
func (s *Server) snapshotRoutes() []route {
	return []route{
		{http.MethodPost, "/v1/sandboxes/{sandboxId}/snapshots", s.snapshotSandbox},
		{http.MethodGet, "/v1/snapshots", s.listSnapshots},
		{http.MethodGet, "/v1/snapshots/{snapshotId}", s.getSnapshot},
		{http.MethodDelete, "/v1/snapshots/{snapshotId}", s.deleteSnapshot},
		{http.MethodPost, "/v1/snapshots/{snapshotId}/fork", s.forkSnapshot},
		{http.MethodGet, "/v1/templates", s.listTemplates},
		{http.MethodPost, "/v1/templates", s.buildTemplate},
		{http.MethodGet, "/v1/templates/{templateRef}", s.getTemplate},
		{http.MethodDelete, "/v1/templates/{templateRef}", s.deleteTemplate},
	}
}

// snapshotSandbox: POST /v1/sandboxes/{sandboxId}/snapshots.
func (s *Server) snapshotSandbox(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req struct {
		ExpectedGeneration sandbox.Generation `json:"expectedGeneration"`
		Name               string             `json:"name"`
	}
	if err := decodeStrict(body, &req); err != nil {
		return err
	}
	info, err := s.rt.Snapshot(r.Context(), sandboxID(r), req.ExpectedGeneration, sandbox.SnapshotOptions{Name: req.Name})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, info)
	return nil
}

// listSnapshots: GET /v1/snapshots.
func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request, _ []byte) error {
	list, err := s.rt.Snapshots(r.Context())
	if err != nil {
		return err
	}
	if list == nil {
		list = []sandbox.SnapshotInfo{}
	}
	writeJSON(w, http.StatusOK, struct {
		Snapshots []sandbox.SnapshotInfo `json:"snapshots"`
	}{list})
	return nil
}

// getSnapshot: GET /v1/snapshots/{snapshotId}.
func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request, _ []byte) error {
	info, err := s.rt.GetSnapshot(r.Context(), r.PathValue("snapshotId"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

// deleteSnapshot: DELETE /v1/snapshots/{snapshotId}.
func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request, _ []byte) error {
	if err := s.rt.RemoveSnapshot(r.Context(), r.PathValue("snapshotId")); err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// forkSnapshot: POST /v1/snapshots/{snapshotId}/fork.
func (s *Server) forkSnapshot(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req struct {
		Count           int          `json:"count"`
		ClientRequestID string       `json:"clientRequestId"`
		Spec            sandbox.Spec `json:"spec"`
	}
	if err := decodeStrict(body, &req); err != nil {
		return err
	}
	req.Spec.ClientRequestID = req.ClientRequestID
	if err := checkSpec(req.Spec); err != nil {
		return err
	}
	if err := s.checkExtensions(req.Spec); err != nil {
		return err
	}
	list, err := s.rt.Fork(r.Context(), r.PathValue("snapshotId"), req.Count, req.Spec)
	if err != nil {
		return err
	}
	ids := make([]sandbox.ID, len(list))
	for i, sb := range list {
		ids[i] = sb.ID
	}
	writeJSON(w, http.StatusCreated, struct {
		SandboxIDs []sandbox.ID `json:"sandboxIds"`
	}{ids})
	return nil
}

// listTemplates: GET /v1/templates.
func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request, _ []byte) error {
	list, err := s.rt.Templates(r.Context())
	if err != nil {
		return err
	}
	if list == nil {
		list = []sandbox.TemplateInfo{}
	}
	writeJSON(w, http.StatusOK, struct {
		Templates []sandbox.TemplateInfo `json:"templates"`
	}{list})
	return nil
}

// buildTemplate: POST /v1/templates.
func (s *Server) buildTemplate(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req struct {
		Name      string `json:"name"`
		BaseImage string `json:"baseImage"`
		Steps     []struct {
			Run  []string `json:"run"`
			File *struct {
				Path    string `json:"path"`
				Content []byte `json:"content"` // standard base64
				Mode    uint32 `json:"mode"`
			} `json:"file"`
		} `json:"steps"`
		Env     []string `json:"env"`
		Workdir string   `json:"workdir"`
	}
	if err := decodeStrict(body, &req); err != nil {
		return err
	}
	b := core.TemplateBuild{Name: req.Name, BaseImage: req.BaseImage, Env: req.Env, WorkingDir: req.Workdir}
	for _, st := range req.Steps {
		step := core.BuildStep{Run: st.Run}
		if st.File != nil {
			step.File = &core.BuildFile{Path: st.File.Path, Content: st.File.Content, Mode: os.FileMode(st.File.Mode)}
		}
		b.Steps = append(b.Steps, step)
	}
	t, err := s.rt.BuildTemplate(r.Context(), b, nil)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, t)
	return nil
}

// getTemplate: GET /v1/templates/{templateRef}.
func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request, _ []byte) error {
	t, err := s.rt.Template(r.Context(), r.PathValue("templateRef"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

// deleteTemplate: DELETE /v1/templates/{templateRef}.
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request, _ []byte) error {
	if err := s.rt.RemoveTemplate(r.Context(), r.PathValue("templateRef")); err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
	return nil
}
