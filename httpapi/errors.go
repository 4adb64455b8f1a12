package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
	"github.com/sandboxd/sandbox/internal/errhttp"
)

// writeError is the one place an error becomes a response: its class (sandbox.ClassOf) gives the code,
// and the code its status (errhttp, the one status table). An unclassified error is a 500 "internal"
// whose detail is logged, not shown.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	writeJSON(w, errhttp.Status(sandbox.ClassOf(err).Code), s.errorBody(r, err))
}

// errorBody is the ErrorResponse of err, as writeError answers it and a stream's "error" event carries
// it; it logs what the answer does not show.
func (s *Server) errorBody(r *http.Request, err error) api.ErrorResponse {
	class := sandbox.ClassOf(err)
	msg := err.Error()
	if class.Err == nil {
		s.log.Error("internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		msg = "internal error"
	} else if errhttp.Status(class.Code) >= 500 {
		s.log.Warn("provider error", "method", r.Method, "path", r.URL.Path, "code", class.Code, "err", err)
	}
	return api.ErrorResponse{Error: api.ErrorBody{Code: class.Code, Message: msg}}
}

// writeJSON writes v as the JSON body of a response with the given status. The body is encoded into a
// buffer reused across responses, so a large one (a command's megabytes of output) is not allocated,
// copied and collected again for every answer.
func writeJSON(w http.ResponseWriter, status int, v any) {
	buf := bodies.Get().(*bytes.Buffer)
	defer putBody(buf)
	var body []byte
	if err := json.NewEncoder(buf).Encode(v); err == nil { // the same bytes as json.Marshal, and '\n'
		body = buf.Bytes()
	} else {
		// Every value written here is a plain domain type; this is a programming error.
		body = []byte(`{"error":{"code":"internal","message":"internal error"}}` + "\n")
		status = http.StatusInternalServerError
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// bodies are writeJSON's buffers. One that grew past maxPooledBody is dropped rather than kept.
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledBody = 16 << 20

func putBody(b *bytes.Buffer) {
	if b.Cap() > maxPooledBody {
		return
	}
	b.Reset()
	bodies.Put(b)
}
