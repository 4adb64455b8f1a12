package httpapi

import (
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
	"github.com/sandboxd/sandbox/internal/schema"
)

// sandboxd's operations beyond the contract are described by a second OpenAPI 3.1 document,
// api.Extensions, and served exactly like the contract's: the same steps in the same order (routing,
// authentication, media type, body limit, validation against the document, then the handler), the same
// ErrorResponse. Each group of operations declares its routes in its own file (images.go, network.go,
// ...) and lists them in extensionRoutes.
//
// The document also holds the schemas of the sandboxd.* keys of spec.extensions
// (components.schemas.SpecExtensions), against which checkExtensions validates a create's and a
// recreate's spec.

// extensionRoutes are the operations of api.Extensions, group by group.
func (s *Server) extensionRoutes() []route {
	var out []route
	for _, group := range s.extensionGroups() {
		out = append(out, group...)
	}
	return out
}

// extensionGroups lists each group's routes; a group adds its method here.
func (s *Server) extensionGroups() [][]route {
	return [][]route{
		s.imageRoutes(),
		s.snapshotRoutes(),
		s.processRoutes(),
		s.terminalRoutes(),
		s.volumeRoutes(),
		s.networkRoutes(),
		s.statsRoutes(),
		s.checkpointRoutes(),
		s.fileRoutes(),
		s.portRoutes(),
	}
}

// extensionDoc is api.Extensions compiled by package schema's own compiler, once per process: its
// operations' validators and the validators of the sandboxd.* keys of spec.extensions.
type extensionDoc struct {
	ops  validators
	keys map[string]schema.Validator // by spec.extensions key
}

var ownExtensions = sync.OnceValues(func() (*extensionDoc, error) { return compileExtensions(schema.Own) })

// compileExtensions compiles api.Extensions with compile.
func compileExtensions(compile schema.Compiler) (*extensionDoc, error) {
	ops, err := compileDocument(api.Extensions, compile)
	if err != nil {
		return nil, err
	}
	doc, err := schema.Parse(api.Extensions)
	if err != nil {
		return nil, err
	}
	ext := &extensionDoc{ops: ops, keys: map[string]schema.Validator{}}
	props, err := doc.Lookup("#/components/schemas/SpecExtensions/properties")
	if err != nil {
		return nil, err
	}
	m, _ := props.(map[string]any)
	for key := range m {
		if !sandbox.IsOwnExtension(key) {
			return nil, fmt.Errorf("SpecExtensions: %q is not in the %s namespace", key, sandbox.ExtensionNamespace)
		}
		v, err := compile(doc, schema.Pointer("#/components/schemas/SpecExtensions/properties", key))
		if err != nil {
			return nil, err
		}
		ext.keys[key] = v
	}
	return ext, nil
}

// extensionsDoc returns api.Extensions compiled with compile (nil: package schema's own, once per
// process); it panics when the document does not compile: a build defect caught by every test.
func extensionsDoc(compile schema.Compiler) *extensionDoc {
	var ext *extensionDoc
	var err error
	if compile == nil {
		ext, err = ownExtensions()
	} else {
		ext, err = compileExtensions(compile)
	}
	if err != nil {
		panic(fmt.Sprintf("httpapi: compiling api/extensions.yaml: %v", err))
	}
	return ext
}

// checkExtensions validates the sandboxd.* keys of a spec's extensions against their schemas: an
// unknown key or a value its schema refuses is ErrInvalidRequest. Keys of other namespaces are not
// looked at.
func (s *Server) checkExtensions(spec sandbox.Spec) error {
	for _, key := range slices.Sorted(func(yield func(string) bool) {
		for k := range spec.Extensions {
			if !yield(k) {
				return
			}
		}
	}) {
		if !sandbox.IsOwnExtension(key) {
			continue
		}
		v, ok := s.ext.keys[key]
		if !ok {
			return fmt.Errorf("extensions: %q is no extension of sandboxd (see api/extensions.yaml): %w", key, sandbox.ErrInvalidRequest)
		}
		doc, rest, err := s.decodeFirst(spec.Extensions[key])
		if err != nil || len(strings.TrimSpace(string(rest))) != 0 {
			return fmt.Errorf("extensions: %q: not one JSON value: %w", key, sandbox.ErrInvalidRequest)
		}
		if verr := v.Validate(doc); verr != nil {
			return fmt.Errorf("extensions: %q%s: %s: %w", key, schema.InstancePointer(verr.Path), oneLine(verr.Message), sandbox.ErrInvalidRequest)
		}
	}
	return nil
}

// checkRawMediaType refuses, before the body is read, a request to an operation that streams a body of
// bytes (raw, from the document) sent with a media type it does not take. An empty body needs no
// header.
func checkRawMediaType(r *http.Request, raw []string) error {
	if slices.Contains(raw, "*/*") {
		return nil // a body passed on as it is (ports.go)
	}
	cts, ok := r.Header["Content-Type"]
	if !ok {
		if r.ContentLength != 0 {
			return fmt.Errorf("no Content-Type: the request body must be sent as %s: %w", strings.Join(raw, " or "), sandbox.ErrInvalidRequest)
		}
		return nil
	}
	if len(cts) != 1 {
		return fmt.Errorf("%d Content-Type headers: the request body must be sent as %s: %w", len(cts), strings.Join(raw, " or "), sandbox.ErrInvalidRequest)
	}
	mt, _, err := mime.ParseMediaType(cts[0])
	if err != nil || !slices.Contains(raw, mt) {
		return fmt.Errorf("Content-Type %q: the request body must be %s: %w", clip(cts[0]), strings.Join(raw, " or "), sandbox.ErrInvalidRequest)
	}
	return nil
}
