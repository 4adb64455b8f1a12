package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/sandboxd/sandbox"
)

// endpoint wraps an operation's handler with the media type check, the body limit and request
// validation, and writes any error. The operation's validator is compiled before the first request, never
// per request.
func (s *Server) endpoint(v *requestValidator, h handlerFunc) http.Handler {
	hasBody := v.body != nil
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		check := checkMediaType(r, hasBody)
		if v.raw != nil {
			// The handler streams the body itself, from r.Body, under the limits it documents.
			check = checkRawMediaType(r, v.raw)
		}
		if err := check; err != nil {
			s.writeError(w, r, err)
			return
		}
		var body []byte
		if hasBody {
			var err error
			if body, err = s.readBody(w, r); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		doc, err := v.validate(r, body, s.decodeFirst)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if len(body) > bigBody {
			// A handler of a large body takes what validation decoded rather than decode it again.
			r = r.WithContext(context.WithValue(r.Context(), docKey{}, doc))
		}
		if err := h(w, r, body); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// bigBody is the size past which a validated body's decoded document is handed to the handler.
const bigBody = 64 << 10

type docKey struct{}

// validatedDoc returns the decoded, validated body of a request larger than bigBody.
func validatedDoc(r *http.Request) (any, bool) {
	doc, ok := r.Context().Value(docKey{}).(any)
	return doc, ok && doc != nil
}

// checkMediaType refuses, before the body is read, a POST or PUT whose body is not said to be JSON. A
// browser sends a page's cross-site request without asking the server first only with the media types of
// a form (text/plain among them), so a page cannot send this API a body blind. An operation that takes a
// body needs the header; another may leave it out when it sends nothing.
func checkMediaType(r *http.Request, takesBody bool) error {
	if r.Method != http.MethodPost && r.Method != http.MethodPut {
		return nil
	}
	cts, ok := r.Header["Content-Type"]
	if !ok {
		if takesBody || r.ContentLength != 0 {
			return fmt.Errorf("no Content-Type: the request body must be sent as application/json: %w", sandbox.ErrInvalidRequest)
		}
		return nil
	}
	if len(cts) != 1 {
		return fmt.Errorf("%d Content-Type headers: the request body must be sent as application/json: %w", len(cts), sandbox.ErrInvalidRequest)
	}
	if mt, _, err := mime.ParseMediaType(cts[0]); err != nil || mt != "application/json" {
		return fmt.Errorf("Content-Type %q: the request body must be application/json: %w", clip(cts[0]), sandbox.ErrInvalidRequest)
	}
	return nil
}

// bodyRate is the pace a request body's deadline moves on at as the body arrives: a second for every
// 64 KiB, past Config.ReadBodyTimeout.
const bodyRate = 64 << 10

// bodyDeadline gives a request that carries a body ReadBodyTimeout to send it, whether a handler reads it
// (readBody moves the deadline on as it arrives, and lifts it once it is in) or the server drains it after
// the answer: without a deadline, a body sent a byte at a time holds its connection for ever.
func (s *Server) bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.bodyTimeout))
		}
		next.ServeHTTP(w, r)
	})
}

// timedBody is a request body whose read deadline is ReadBodyTimeout after reading began, plus a second
// for every 64 KiB read: a body slower on average than 64 KiB/s, once that grace is spent, is cut off.
type timedBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	start time.Time
	grace time.Duration
	n     int64
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.n += int64(n)
		_ = b.rc.SetReadDeadline(b.start.Add(b.grace + time.Duration(b.n)*(time.Second/bodyRate)))
	}
	return n, err
}

// readBody reads the whole body within the limit (ErrRequestTooLarge past it) and its deadline
// (ErrInvalidRequest past it).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > s.maxBody {
		return nil, fmt.Errorf("request body of %d bytes is over the limit of %d: %w",
			r.ContentLength, s.maxBody, sandbox.ErrRequestTooLarge)
	}
	rc := http.NewResponseController(w)
	tb := &timedBody{ReadCloser: r.Body, rc: rc, start: time.Now(), grace: s.bodyTimeout}
	body, err := io.ReadAll(http.MaxBytesReader(w, tb, s.maxBody))
	if err != nil {
		// The deadline stays: it bounds the drain of what is left after the answer.
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, fmt.Errorf("request body is over the limit of %d bytes: %w", s.maxBody, sandbox.ErrRequestTooLarge)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, fmt.Errorf("the request body did not arrive within %v and a second for every 64 KiB of it: %w",
				s.bodyTimeout, sandbox.ErrInvalidRequest)
		}
		return nil, fmt.Errorf("reading the request body: %v: %w", err, sandbox.ErrInvalidRequest)
	}
	// Lifted, or the server's wait for the client going away (which cancels a running command) would
	// end at the deadline.
	_ = rc.SetReadDeadline(time.Time{})
	return body, nil
}

// decodeStrict decodes a validated JSON body into v, refusing unknown fields and trailing data.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("request body: %v: %w", err, sandbox.ErrInvalidRequest)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("request body: data after the JSON document: %w", sandbox.ErrInvalidRequest)
	}
	return nil
}

// queryInt parses an integer query parameter, already checked against the contract, with a default when
// it is absent.
func queryInt(r *http.Request, name string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("query parameter %q: %q is not an integer: %w", name, v, sandbox.ErrInvalidRequest)
	}
	return n, nil
}

// expectedGeneration returns the expectedGeneration query parameter, required and >= 1.
func expectedGeneration(r *http.Request) (sandbox.Generation, error) {
	n, err := queryInt(r, "expectedGeneration", 0)
	if err != nil {
		return 0, err
	}
	if n < 1 {
		return 0, fmt.Errorf("query parameter \"expectedGeneration\" must be an integer >= 1: %w", sandbox.ErrInvalidRequest)
	}
	return sandbox.Generation(n), nil
}

func sandboxID(r *http.Request) sandbox.ID { return sandbox.ID(r.PathValue("sandboxId")) }
