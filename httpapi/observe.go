package httpapi

import (
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// Every operation is wrapped by observe, outside authentication, so that what it sees is what the
// client got: the status of every answer, 401s included, and how long it took to its last byte (an
// event stream: until it ended). It tells Config.ObserveRequest (the daemon's metrics) and, for a
// request that may change something (any method but GET and HEAD), writes one audit line: who (the
// token's name), what (the operation, its sandbox and the other resource its path names: a volume,
// snapshot, template, image, process or port) and the result.

// auditNames are the audit line's names of the path parameters that name a resource besides the
// sandbox. A port's proxied {path} names none.
var auditNames = map[string]string{
	"volumeName":  "volume",
	"snapshotId":  "snapshot",
	"templateRef": "template",
	"digest":      "image",
	"pid":         "pid",
	"port":        "port",
}

// auditParam is a path parameter the audit line names.
type auditParam struct{ param, key string }

// auditParams are the path parameters of operation, in order, that the audit line names.
func auditParams(operation string) []auditParam {
	var out []auditParam
	for rest := operation; ; {
		i := strings.Index(rest, "{")
		if i < 0 {
			return out
		}
		j := strings.Index(rest[i:], "}")
		if j < 0 {
			return out
		}
		name := strings.TrimSuffix(rest[i+1:i+j], "...")
		if key, ok := auditNames[name]; ok {
			out = append(out, auditParam{param: name, key: key})
		}
		rest = rest[i+j:]
	}
}

// observe wraps one operation, named "METHOD /path/{param}" as in its document.
func (s *Server) observe(operation string, next http.Handler) http.Handler {
	if s.observeRequest == nil && s.audit == nil {
		return next
	}
	params := auditParams(operation)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			d := time.Since(start)
			status := sw.status
			if status == 0 {
				status = http.StatusOK // a handler that wrote nothing answered 200 with no body
			}
			if s.observeRequest != nil {
				s.observeRequest(operation, status, d)
			}
			if s.audit != nil && r.Method != http.MethodGet && r.Method != http.MethodHead {
				who := sw.who
				if who == "" {
					who = "-" // authentication is off, or the request had no valid token
				}
				attrs := make([]slog.Attr, 0, 6+len(params))
				attrs = append(attrs, slog.String("who", who), slog.String("operation", operation),
					slog.String("sandbox", r.PathValue("sandboxId")))
				for _, p := range params {
					attrs = append(attrs, slog.String(p.key, r.PathValue(p.param)))
				}
				attrs = append(attrs, slog.Int("status", status), slog.Duration("duration", d), slog.String("remote", r.RemoteAddr))
				s.audit.LogAttrs(r.Context(), slog.LevelInfo, "audit", attrs...)
			}
		}()
		next.ServeHTTP(sw, r)
	})
}

// statusWriter remembers the status a handler wrote, and the name of the token the request was
// authenticated with (guard sets it).
type statusWriter struct {
	http.ResponseWriter
	status int
	who    string
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's flusher, deadlines and hijacker.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// activity tells the runtime, for an operation on one sandbox, that the sandbox is in use while the
// request is open (a stream included), so that a sandbox with an idle bound is not idle meanwhile. It
// runs after authentication: a request without a valid token uses nothing.
func (s *Server) activity(path string, next http.Handler) http.Handler {
	if !strings.Contains(path, "{sandboxId}") {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		done := s.rt.Active(sandboxID(r))
		defer done()
		next.ServeHTTP(w, r)
	})
}
