package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

// readFile: GET /v1/sandboxes/{sandboxId}/files/content?path=&expectedGeneration=.
func (s *Server) readFile(w http.ResponseWriter, r *http.Request, _ []byte) error {
	gen, path, err := generationAndPath(r)
	if err != nil {
		return err
	}
	data, err := s.rt.ReadFile(r.Context(), sandboxID(r), gen, path)
	if err != nil {
		return err
	}
	writeFileContent(w, path, data)
	return nil
}

// writeFile: PUT /v1/sandboxes/{sandboxId}/files/content. contentBase64 is standard, padded base64.
func (s *Server) writeFile(w http.ResponseWriter, r *http.Request, body []byte) error {
	req, ok := fileWriteFromDoc(r)
	if !ok {
		if err := decodeStrict(body, &req); err != nil {
			return err
		}
	}
	if err := checkPath(req.Path); err != nil {
		return err
	}
	// The decoder skips line breaks; standard base64 (RFC 4648) has none, so they are refused first.
	if strings.ContainsAny(req.ContentBase64, "\r\n") {
		return fmt.Errorf("contentBase64 is not standard base64: it has a line break: %w", sandbox.ErrInvalidRequest)
	}
	data, err := base64.StdEncoding.Strict().DecodeString(req.ContentBase64)
	if err != nil {
		return fmt.Errorf("contentBase64 is not standard base64: %v: %w", err, sandbox.ErrInvalidRequest)
	}
	if len(data) > sandbox.MaxFileBytes {
		return fmt.Errorf("file of %d bytes is over the limit of %d: %w", len(data), sandbox.MaxFileBytes, sandbox.ErrRequestTooLarge)
	}
	if err := s.rt.WriteFile(r.Context(), sandboxID(r), req.ExpectedGeneration, req.Path, data); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.FileContent{Path: req.Path, ContentBase64: "", Size: int64(len(data))})
	return nil
}

// writeFileContent writes the FileContent of data read at path as writeJSON would, base64-encoding the
// content straight into the answer: the standard alphabet needs no JSON escaping, so the encoder's scan
// of megabytes of it, and two copies, are spared.
func writeFileContent(w http.ResponseWriter, path string, data []byte) {
	p, err := json.Marshal(path)
	if err != nil {
		writeJSON(w, http.StatusOK, api.FileContent{Path: path, ContentBase64: base64.StdEncoding.EncodeToString(data), Size: int64(len(data))})
		return
	}
	const head, mid = `{"path":`, `,"contentBase64":"`
	size := strconv.Itoa(len(data))
	n := base64.StdEncoding.EncodedLen(len(data))
	body := make([]byte, 0, len(head)+len(p)+len(mid)+n+len(`","size":`)+len(size)+2)
	body = append(append(append(body, head...), p...), mid...)
	body = body[:len(body)+n]
	base64.StdEncoding.Encode(body[len(body)-n:], data)
	body = append(append(append(body, `","size":`...), size...), "}\n"...)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// fileWriteFromDoc builds the request of a large write from the document validation decoded (the
// contract fixes its three members and their types), sparing a second decode of megabytes of base64.
func fileWriteFromDoc(r *http.Request) (api.FileWriteRequest, bool) {
	doc, ok := validatedDoc(r)
	if !ok {
		return api.FileWriteRequest{}, false
	}
	m, ok := doc.(map[string]any)
	if !ok || len(m) != 3 {
		return api.FileWriteRequest{}, false
	}
	path, ok1 := m["path"].(string)
	content, ok2 := m["contentBase64"].(string)
	num, ok3 := m["expectedGeneration"].(json.Number)
	if !ok1 || !ok2 || !ok3 {
		return api.FileWriteRequest{}, false
	}
	gen, err := num.Int64()
	if err != nil {
		return api.FileWriteRequest{}, false
	}
	return api.FileWriteRequest{ExpectedGeneration: sandbox.Generation(gen), Path: path, ContentBase64: content}, true
}

// listFiles: GET /v1/sandboxes/{sandboxId}/files/entries?path=&expectedGeneration=. path defaults to ".".
func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, _ []byte) error {
	gen, err := expectedGeneration(r)
	if err != nil {
		return err
	}
	path := "."
	if q := r.URL.Query(); q.Has("path") {
		path = q.Get("path")
	}
	if err := checkPath(path); err != nil {
		return err
	}
	entries, err := s.rt.ListFiles(r.Context(), sandboxID(r), gen, path)
	if err != nil {
		return err
	}
	if entries == nil {
		entries = []sandbox.FileEntry{}
	}
	writeJSON(w, http.StatusOK, api.FileList{Entries: entries})
	return nil
}

// generationAndPath reads the expectedGeneration and path query parameters of a file call, the path
// checked as every file call checks it.
func generationAndPath(r *http.Request) (sandbox.Generation, string, error) {
	gen, err := expectedGeneration(r)
	if err != nil {
		return 0, "", err
	}
	path := r.URL.Query().Get("path")
	if err := checkPath(path); err != nil {
		return 0, "", err
	}
	return gen, path, nil
}
