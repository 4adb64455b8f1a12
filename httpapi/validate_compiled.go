package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
	"github.com/sandboxd/sandbox/internal/schema"
	"github.com/sandboxd/sandbox/internal/jsondoc"
)

// The contract's request schemas are compiled once per process by package schema, which enforces
// exactly the JSON Schema keywords the contract uses and refuses to compile any other: a request only
// runs the compiled trees.

// requestValidators is every operation of the embedded contract, keyed by "METHOD /path/{param}".
var requestValidators = sync.OnceValues(func() (map[string]*requestValidator, error) {
	doc, err := schema.Parse(api.OpenAPI)
	if err != nil {
		return nil, err
	}
	ops, err := doc.Operations()
	if err != nil {
		return nil, err
	}
	out := make(map[string]*requestValidator, len(ops))
	for key, op := range ops {
		v := &requestValidator{params: op.Params}
		for _, p := range op.Params {
			v.hasQuery = v.hasQuery || p.In == "query"
		}
		if op.Body != nil {
			v.body, v.bodyReq = op.Body.Schema, op.Body.Required
		}
		out[key] = v
	}
	return out, nil
})

// validatorFor returns the precompiled validator of an operation; it panics when the contract does not
// have it or does not compile: a build defect caught by every test.
func validatorFor(method, path string) *requestValidator {
	all, err := requestValidators()
	if err != nil {
		panic(fmt.Sprintf("httpapi: compiling the contract's request schemas: %v", err))
	}
	v := all[method+" "+path]
	if v == nil {
		panic(fmt.Sprintf("httpapi: the contract has no operation %s %s", method, path))
	}
	return v
}

// requestValidator checks one operation's parameters and body. It is immutable, safe for concurrent use.
type requestValidator struct {
	params   []*schema.Param // path item's, then the operation's, in the contract's order
	hasQuery bool
	body     *schema.Schema // nil: the operation takes no body
	bodyReq  bool
}

// validate checks r's parameters and body (nil without one) against the operation, and returns the
// body as it decoded it (nil without one, or when something follows the document). Every error is
// ErrInvalidRequest with a one-line message that says where and what. The body's media type is
// checkMediaType's, before the body is read.
func (v *requestValidator) validate(r *http.Request, body []byte) (any, error) {
	var query url.Values
	if v.hasQuery {
		query = r.URL.Query()
	}
	for _, p := range v.params {
		if err := validateParam(p, r, query); err != nil {
			return nil, fmt.Errorf("%s parameter %q: %s: %w", p.In, p.Name, err, sandbox.ErrInvalidRequest)
		}
	}
	if v.body == nil {
		return nil, nil
	}
	if len(body) == 0 {
		if v.bodyReq {
			return nil, fmt.Errorf("request body: value is required but missing: %w", sandbox.ErrInvalidRequest)
		}
		return nil, nil
	}
	// The first value is what is validated, as kin-openapi's decoder takes it; data after it is the
	// handlers' to refuse (decodeStrict), so such a document is not handed to them.
	doc, rest, err := jsondoc.DecodeFirst(body)
	if err != nil {
		return nil, fmt.Errorf("request body: not valid JSON: %s: %w", oneLine(err.Error()), sandbox.ErrInvalidRequest)
	}
	if err := v.body.Validate(doc); err != nil {
		return nil, fmt.Errorf("request body: %s: %s: %w", schema.InstancePointer(err.Path), oneLine(err.Message), sandbox.ErrInvalidRequest)
	}
	if !jsondoc.Blank(rest) {
		return nil, nil
	}
	return doc, nil
}

// validateParam decodes and checks one parameter the way kin-openapi's request filter does: a query
// parameter's first non-empty value counts, an empty value of a non-string type is refused, and an
// empty path segment is a missing parameter.
func validateParam(p *schema.Param, r *http.Request, query url.Values) error {
	var raw string
	found := false
	if p.In == "path" {
		raw = r.PathValue(p.Name)
		found = raw != ""
	} else if values, ok := query[p.Name]; ok {
		found = true
		for _, s := range values {
			if raw = s; raw != "" {
				break
			}
		}
	}
	if !found {
		if p.Required {
			return errors.New("value is required but missing")
		}
		return nil
	}
	if raw == "" && p.Type != "string" {
		if p.AllowEmptyValue {
			return nil
		}
		return errors.New("empty value is not allowed")
	}
	if raw == "" && p.AllowEmptyValue {
		return nil
	}
	var value any
	switch p.Type {
	case "string":
		value = raw
	case "integer":
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return fmt.Errorf("%s is not an integer", strconv.Quote(raw))
		}
		value = json.Number(strconv.FormatInt(n, 10))
	case "number":
		// ParseFloat alone would take hexadecimal, underscores, infinities and NaN.
		f, err := strconv.ParseFloat(raw, 64)
		if err != nil || strings.ContainsFunc(raw, func(r rune) bool { return !strings.ContainsRune("+-.0123456789eE", r) }) {
			return fmt.Errorf("%s is not a number", strconv.Quote(raw))
		}
		value = json.Number(strconv.FormatFloat(f, 'g', -1, 64))
	case "boolean":
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return fmt.Errorf("%s is not a boolean", strconv.Quote(raw))
		}
		value = b
	}
	if err := p.Schema.Validate(value); err != nil {
		return errors.New(oneLine(err.Message))
	}
	return nil
}

// oneLine folds any run of white space, line breaks included, into one space.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
