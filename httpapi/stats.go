package httpapi

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

// statsRoutes are the operations of what a daemon and its sandboxes use.
func (s *Server) statsRoutes() []route {
	return []route{
		{http.MethodGet, "/v1/sandboxes/{sandboxId}/stats", s.getSandboxStats},
		{http.MethodGet, "/metrics", s.getMetrics},
	}
}

// getSandboxStats: GET /v1/sandboxes/{sandboxId}/stats.
func (s *Server) getSandboxStats(w http.ResponseWriter, r *http.Request, _ []byte) error {
	sb, u, err := s.rt.Stats(r.Context(), sandboxID(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.SandboxStats{
		SandboxID: sb.ID, Generation: sb.Generation, State: sb.State, ObservedAt: time.Now().UTC(), Usage: u,
	})
	return nil
}

// getMetrics: GET /metrics, the daemon's metrics (Config.Metrics), behind the API's authentication.
func (s *Server) getMetrics(w http.ResponseWriter, r *http.Request, _ []byte) error {
	if s.metrics == nil {
		return fmt.Errorf("this daemon serves no metrics: %w", sandbox.ErrNotFound)
	}
	s.metrics.ServeHTTP(w, r)
	return nil
}
