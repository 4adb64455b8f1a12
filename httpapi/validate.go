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
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

// loadContract loads and checks the embedded OpenAPI document.
func loadContract() (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	return doc, nil
}

// operation returns the contract's route for method and path; it panics when the contract has none, which
// only a mismatch between the route table and the embedded document can cause.
func (s *Server) operation(method, path string) *routers.Route {
	item := s.contract.Paths.Value(path)
	if item == nil || item.GetOperation(method) == nil {
		panic(fmt.Sprintf("httpapi: the contract has no operation %s %s", method, path))
	}
	return &routers.Route{Spec: s.contract, Path: path, PathItem: item, Method: method, Operation: item.GetOperation(method)}
}

// validateOptions: defaults are applied by the handlers (after=0, path="."), not written back into the
// request; there is no security scheme in the contract.
var validateOptions = &openapi3filter.Options{
	SkipSettingDefaults: true,
	AuthenticationFunc:  openapi3filter.NoopAuthenticationFunc,
}

// endpoint wraps an operation's handler with the body limit and request validation, and writes any error.
func (s *Server) endpoint(op *routers.Route, h handlerFunc) http.Handler {
	hasBody := op.Operation.RequestBody != nil
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if hasBody {
			var err error
			if body, err = s.readBody(w, r); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		if err := s.validate(r, op, body); err != nil {
			s.writeError(w, r, err)
			return
		}
		if err := h(w, r, body); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// readBody reads the whole body within the limit: ErrRequestTooLarge past it.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > s.maxBody {
		return nil, fmt.Errorf("request body of %d bytes is over the limit of %d: %w",
			r.ContentLength, s.maxBody, sandbox.ErrRequestTooLarge)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, fmt.Errorf("request body is over the limit of %d bytes: %w", s.maxBody, sandbox.ErrRequestTooLarge)
		}
		return nil, fmt.Errorf("reading the request body: %v: %w", err, sandbox.ErrInvalidRequest)
	}
	return body, nil
}

// validate checks the request's parameters and body against the contract. A body without a Content-Type
// is taken as JSON, the only media type of the contract; any other media type is refused.
func (s *Server) validate(r *http.Request, op *routers.Route, body []byte) error {
	params := map[string]string{}
	for _, p := range op.PathItem.Parameters {
		if p.Value != nil && p.Value.In == openapi3.ParameterInPath {
			params[p.Value.Name] = r.PathValue(p.Value.Name)
		}
	}
	// Validation reads the request; give it a copy so the handler's view stays as the client sent it.
	vr := r.Clone(r.Context())
	if op.Operation.RequestBody != nil {
		ct := r.Header.Get("Content-Type")
		if ct == "" {
			ct = "application/json"
		} else if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return fmt.Errorf("Content-Type %q: the request body must be application/json: %w", ct, sandbox.ErrInvalidRequest)
		}
		vr.Header.Set("Content-Type", ct)
		vr.Body = io.NopCloser(bytes.NewReader(body))
		vr.ContentLength = int64(len(body))
		vr.GetBody = nil
	}
	in := &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: op, Options: validateOptions}
	if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
		return fmt.Errorf("%s: %w", validationMessage(err), sandbox.ErrInvalidRequest)
	}
	return nil
}

// validationMessage makes a validation error one readable line: where it is and what is wrong, without
// the schema dump the validator appends.
func validationMessage(err error) string {
	var me openapi3.MultiError
	if errors.As(err, &me) && len(me) > 0 {
		err = me[0]
	}
	where, detail := "request", err.Error()
	var re *openapi3filter.RequestError
	if errors.As(err, &re) {
		switch {
		case re.Parameter != nil:
			where = fmt.Sprintf("%s parameter %q", re.Parameter.In, re.Parameter.Name)
		case re.RequestBody != nil:
			where = "request body"
		}
		if re.Err != nil {
			detail = re.Err.Error()
		} else {
			detail = re.Reason
		}
	}
	if i := strings.Index(detail, "\nSchema:"); i >= 0 {
		detail = detail[:i]
	}
	detail = strings.TrimPrefix(strings.TrimSpace(detail), "validation failed due to: ")
	// The contract's one "not" is SandboxSpec's: image and template exclude each other.
	detail = strings.Replace(detail, "'not' failed", "image and template cannot both be set", 1)
	return where + ": " + strings.Join(strings.Fields(detail), " ")
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
