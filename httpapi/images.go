package httpapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

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
	return s.imageWork(w, r, func(progress func(sandbox.ImageProgress)) (sandbox.ImageInfo, error) {
		return s.rt.PullImage(r.Context(), req.Reference, progress)
	})
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
	return s.imageWork(w, r, func(progress func(sandbox.ImageProgress)) (sandbox.ImageInfo, error) {
		return s.rt.ImportImage(r.Context(), req.Path, req.Name, progress)
	})
}

// progressEvery is the shortest time between two progress events of a pull's or an import's stream.
const progressEvery = 100 * time.Millisecond

// imageWork answers a pull or an import that work does. A client that accepts only JSON gets the image
// once it is in the store. One that accepts text/event-stream gets Server-Sent Events: "progress"
// events (ImageProgress, at most one each progressEvery), ": heartbeat" comments while nothing moves,
// and last one "done" event (ImageInfo) or one "error" event (ErrorResponse). The stream begins with the
// first report or the first heartbeat, whichever comes first; a failure before it (a malformed
// reference, an unknown image, an unreachable registry, mostly) is an ordinary error answer. The
// work is the request's: a client that goes away cancels it.
func (s *Server) imageWork(w http.ResponseWriter, r *http.Request, work func(func(sandbox.ImageProgress)) (sandbox.ImageInfo, error)) error {
	if !acceptsEventStream(r) {
		info, err := work(nil)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, info)
		return nil
	}
	var (
		mu     sync.Mutex
		latest *sandbox.ImageProgress
		moved  = make(chan struct{}, 1)
		done   = make(chan struct{})
		info   sandbox.ImageInfo
		err    error
	)
	go func() {
		defer close(done)
		info, err = work(func(p sandbox.ImageProgress) {
			mu.Lock()
			latest = &p
			mu.Unlock()
			select {
			case moved <- struct{}{}:
			default:
			}
		})
	}()
	var send func(func() bool) bool
	event := func(name string, v any) bool {
		data, merr := json.Marshal(v)
		return merr == nil && send(func() bool {
			_, werr := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data)
			return werr == nil
		})
	}
	beat := time.NewTicker(s.heartbeat)
	defer beat.Stop()
	var last time.Time
	for {
		select {
		case <-done:
			if send == nil && err != nil {
				return err // nothing sent yet: an ordinary answer
			}
			if send == nil {
				send = s.startSSE(w)
			}
			if err != nil {
				event("error", s.errorBody(r, err))
			} else {
				mu.Lock()
				final := latest
				mu.Unlock()
				if final != nil {
					event("progress", final)
				}
				event("done", info)
			}
			return nil
		case <-moved:
			if wait := progressEvery - time.Since(last); wait > 0 {
				select { // a later report replaces this one meanwhile
				case <-time.After(wait):
				case <-done:
				}
			}
			if send == nil {
				send = s.startSSE(w)
			}
			mu.Lock()
			p := *latest
			mu.Unlock()
			last = time.Now()
			if !event("progress", p) {
				<-done // the request's end cancels the work, or it completes
				return nil
			}
		case <-beat.C:
			if send == nil {
				send = s.startSSE(w)
			}
			if !send(func() bool { _, werr := io.WriteString(w, ": heartbeat\n\n"); return werr == nil }) {
				<-done
				return nil
			}
		}
	}
}

// acceptsEventStream reports whether the client asked for text/event-stream.
func acceptsEventStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
				return true
			}
		}
	}
	return false
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
