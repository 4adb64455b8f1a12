package httpapi

import (
	"bytes"
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
	"github.com/sandboxd/sandbox/internal/jsondoc"
	"github.com/sandboxd/sandbox/internal/schema"
)

// The contract's request schemas are compiled once, by package schema's own compiler unless
// Config.Schemas names another (the library path, docs/design/request-validation.md): a request only
// runs the compiled validators.

// validators is every operation of the embedded contract, keyed by "METHOD /path/{param}".
type validators map[string]*requestValidator

// ownValidators are the contract's operations compiled by package schema, once per process.
var ownValidators = sync.OnceValues(func() (validators, error) { return compileValidators(schema.Own) })

// compileValidators compiles every operation of the embedded contract with compile.
func compileValidators(compile schema.Compiler) (validators, error) {
	return compileDocument(api.OpenAPI, compile)
}

// compileDocument compiles every operation of an OpenAPI document with compile.
func compileDocument(src []byte, compile schema.Compiler) (validators, error) {
	doc, err := schema.Parse(src)
	if err != nil {
		return nil, err
	}
	ops, err := doc.Operations(compile)
	if err != nil {
		return nil, err
	}
	out := make(validators, len(ops))
	for key, op := range ops {
		v := &requestValidator{params: op.Params}
		for _, p := range op.Params {
			v.hasQuery = v.hasQuery || p.In == "query"
		}
		if op.Body != nil {
			v.body, v.bodyReq = op.Body.Schema, op.Body.Required
		}
		v.raw = op.RawBody
		out[key] = v
	}
	return out, nil
}

// contractValidators returns the contract's operations compiled with compile (nil: package schema's
// own, compiled once per process); it panics when the contract does not compile: a build defect
// caught by every test.
func contractValidators(compile schema.Compiler) validators {
	var all validators
	var err error
	if compile == nil {
		all, err = ownValidators()
	} else {
		all, err = compileValidators(compile)
	}
	if err != nil {
		panic(fmt.Sprintf("httpapi: compiling the contract's request schemas: %v", err))
	}
	return all
}

// operation returns the validator of one operation; it panics when the document does not have it.
func (all validators) operation(method, path string) *requestValidator {
	v := all[method+" "+path]
	if v == nil {
		panic(fmt.Sprintf("httpapi: the API document has no operation %s %s", method, path))
	}
	return v
}

// requestValidator checks one operation's parameters and body. It is immutable, safe for concurrent use.
type requestValidator struct {
	params   []*schema.Param // path item's, then the operation's, in the contract's order
	hasQuery bool
	body     schema.Validator // nil: the operation takes no JSON body
	bodyReq  bool
	raw      []string // the media types of a body of bytes the handler streams itself; nil for none
}

// validate checks r's parameters and body (nil without one) against the operation, and returns the
// body as decodeFirst decoded it (nil without one, or when something follows the document). Every
// error is ErrInvalidRequest with a one-line message that says where and what. The body's media type
// is checkMediaType's, before the body is read.
func (v *requestValidator) validate(r *http.Request, body []byte, decodeFirst func([]byte) (any, []byte, error)) (any, error) {
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
	doc, rest, err := decodeFirst(body)
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

// stdDecodeFirst is jsondoc.DecodeFirst done with encoding/json, the plain path of Config.PlainJSON: the
// same values, errors in encoding/json's words.
func stdDecodeFirst(body []byte) (any, []byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, nil, err
	}
	return doc, body[dec.InputOffset():], nil
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
