package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/sandboxd/sandbox"
)

// The contract's request schemas are compiled once per process, with the same JSON Schema 2020-12
// validator kin-openapi uses for OpenAPI 3.1 documents, from the same JSON kin-openapi gives it (the
// document's own marshalling). kin-openapi compiles that validator again on every call; here a request
// only runs the compiled schemas.

// contractURL names the whole contract, added as one resource so that every "#/components/..." reference
// of a request schema resolves inside it.
const contractURL = "urn:sandboxd:contract.json"

// requestValidators is every operation of the embedded contract, keyed by "METHOD /path/{param}".
var requestValidators = sync.OnceValues(func() (map[string]*requestValidator, error) {
	doc, err := loadContract()
	if err != nil {
		return nil, err
	}
	return compileRequests(doc)
})

// validatorFor returns the precompiled validator of an operation; it panics, like operation, when the
// contract does not have it or does not compile: a build defect caught by every test.
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
	params   []*paramValidator // path item's, then the operation's, in the contract's order
	hasQuery bool
	body     *jsonschema.Schema // nil: the operation takes no body
	bodyReq  bool
	// notMessages names, by the schema location of a "not" keyword, what it forbids: the generic
	// "'not' failed" says nothing to a client.
	notMessages map[string]string
}

// paramValidator is one path or query parameter of a primitive type.
type paramValidator struct {
	in, name   string
	required   bool
	allowEmpty bool
	typ        string // openapi3.TypeString, TypeInteger, TypeNumber or TypeBoolean
	schema     *jsonschema.Schema
}

// compileRequests compiles the request validation of every operation of doc.
func compileRequests(doc *openapi3.T) (map[string]*requestValidator, error) {
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	contract, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(contractURL, contract); err != nil {
		return nil, err
	}
	nots := notMessages(doc)
	out := map[string]*requestValidator{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			v, err := compileOperation(c, path, method, item, op)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", method, path, err)
			}
			v.notMessages = nots
			out[method+" "+path] = v
		}
	}
	return out, nil
}

func compileOperation(c *jsonschema.Compiler, path, method string, item *openapi3.PathItem, op *openapi3.Operation) (*requestValidator, error) {
	v := &requestValidator{}
	itemPtr := "#/paths/" + pointerToken(path)
	opPtr := itemPtr + "/" + strings.ToLower(method)
	add := func(ref *openapi3.ParameterRef, ptr string) error {
		if ref.Ref != "" {
			ptr = ref.Ref
		}
		p, err := compileParam(c, ref.Value, ptr)
		if err != nil {
			return err
		}
		v.params = append(v.params, p)
		v.hasQuery = v.hasQuery || p.in == openapi3.ParameterInQuery
		return nil
	}
	for i, ref := range item.Parameters {
		// An operation's parameter of the same name and place replaces the path item's.
		if op.Parameters.GetByInAndName(ref.Value.In, ref.Value.Name) != nil {
			continue
		}
		if err := add(ref, fmt.Sprintf("%s/parameters/%d", itemPtr, i)); err != nil {
			return nil, err
		}
	}
	for i, ref := range op.Parameters {
		if err := add(ref, fmt.Sprintf("%s/parameters/%d", opPtr, i)); err != nil {
			return nil, err
		}
	}
	if rb := op.RequestBody; rb != nil {
		ptr := opPtr + "/requestBody"
		if rb.Ref != "" {
			ptr = rb.Ref
		}
		if len(rb.Value.Content) != 1 || rb.Value.Content.Get("application/json") == nil ||
			rb.Value.Content.Get("application/json").Schema == nil {
			return nil, errors.New("a request body must have exactly one media type, application/json, with a schema")
		}
		schema, err := c.Compile(contractURL + ptr + "/content/" + pointerToken("application/json") + "/schema")
		if err != nil {
			return nil, err
		}
		v.body, v.bodyReq = schema, rb.Value.Required
	}
	return v, nil
}

// compileParam compiles a parameter serialized the default way (simple in a path, form in a query) with
// a schema of one primitive type: what the contract uses and all this validator decodes.
func compileParam(c *jsonschema.Compiler, p *openapi3.Parameter, ptr string) (*paramValidator, error) {
	if p.In != openapi3.ParameterInPath && p.In != openapi3.ParameterInQuery {
		return nil, fmt.Errorf("parameter %q: only path and query parameters are supported, not %s", p.Name, p.In)
	}
	if p.Content != nil || p.Schema == nil || p.Style != "" || p.Explode != nil {
		return nil, fmt.Errorf("parameter %q: only a schema with the default style is supported", p.Name)
	}
	s := p.Schema.Value
	types := s.Type.Slice()
	if len(types) != 1 || len(s.AllOf)+len(s.AnyOf)+len(s.OneOf) > 0 {
		return nil, fmt.Errorf("parameter %q: only a schema of one type is supported", p.Name)
	}
	switch types[0] {
	case openapi3.TypeString, openapi3.TypeInteger, openapi3.TypeNumber, openapi3.TypeBoolean:
	default:
		return nil, fmt.Errorf("parameter %q: type %s is not supported", p.Name, types[0])
	}
	if types[0] == openapi3.TypeInteger && s.Format == "int32" {
		return nil, fmt.Errorf("parameter %q: format int32 is not supported", p.Name)
	}
	schema, err := c.Compile(contractURL + ptr + "/schema")
	if err != nil {
		return nil, err
	}
	return &paramValidator{in: p.In, name: p.Name, required: p.Required, allowEmpty: p.AllowEmptyValue,
		typ: types[0], schema: schema}, nil
}

// notMessages describes the contract's "not: {required: [a, b]}" schemas, the one shape it uses.
func notMessages(doc *openapi3.T) map[string]string {
	out := map[string]string{}
	for name, ref := range doc.Components.Schemas {
		if not := ref.Value.Not; not != nil && not.Value != nil && len(not.Value.Required) > 1 {
			req := not.Value.Required
			out[contractURL+"#/components/schemas/"+pointerToken(name)+"/not"] =
				strings.Join(req[:len(req)-1], ", ") + " and " + req[len(req)-1] + " cannot both be set"
		}
	}
	return out
}

// pointerToken escapes one JSON Pointer token for a URL fragment.
func pointerToken(s string) string {
	s = strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
	return url.PathEscape(s)
}

// validate checks r's parameters and body (nil without one) against the operation. Every error is
// ErrInvalidRequest with a one-line message that says where and what.
func (v *requestValidator) validate(r *http.Request, body []byte) error {
	if v.body != nil {
		// A body without a Content-Type is taken as JSON, the contract's only media type.
		if ct := r.Header.Get("Content-Type"); ct != "" {
			if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
				return fmt.Errorf("Content-Type %q: the request body must be application/json: %w", ct, sandbox.ErrInvalidRequest)
			}
		}
	}
	var query url.Values
	if v.hasQuery {
		query = r.URL.Query()
	}
	for _, p := range v.params {
		if err := p.validate(r, query); err != nil {
			return fmt.Errorf("%s parameter %q: %s: %w", p.in, p.name, err, sandbox.ErrInvalidRequest)
		}
	}
	if v.body == nil {
		return nil
	}
	if len(body) == 0 {
		if v.bodyReq {
			return fmt.Errorf("request body: value is required but missing: %w", sandbox.ErrInvalidRequest)
		}
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("request body: not valid JSON: %s: %w", err, sandbox.ErrInvalidRequest)
	}
	if err := v.body.Validate(doc); err != nil {
		return fmt.Errorf("request body: %s: %w", schemaMessage(err, doc, v.notMessages, true), sandbox.ErrInvalidRequest)
	}
	return nil
}

// validate decodes and checks one parameter the way kin-openapi's request filter does: a query
// parameter's first non-empty value counts, an empty value of a non-string type is refused, and an
// empty path segment is a missing parameter.
func (p *paramValidator) validate(r *http.Request, query url.Values) error {
	var raw string
	found := false
	if p.in == openapi3.ParameterInPath {
		raw = r.PathValue(p.name)
		found = raw != ""
	} else if values, ok := query[p.name]; ok {
		found = true
		for _, s := range values {
			if raw = s; raw != "" {
				break
			}
		}
	}
	if !found {
		if p.required {
			return errors.New("value is required but missing")
		}
		return nil
	}
	if raw == "" && p.typ != openapi3.TypeString {
		if p.allowEmpty {
			return nil
		}
		return errors.New("empty value is not allowed")
	}
	if raw == "" && p.allowEmpty {
		return nil
	}
	var value any
	switch p.typ {
	case openapi3.TypeString:
		value = raw
	case openapi3.TypeInteger:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return fmt.Errorf("%s is not an integer", strconv.Quote(raw))
		}
		value = n
	case openapi3.TypeNumber:
		// ParseFloat alone would take hexadecimal, underscores, infinities and NaN.
		f, err := strconv.ParseFloat(raw, 64)
		if err != nil || strings.ContainsFunc(raw, func(r rune) bool { return !strings.ContainsRune("+-.0123456789eE", r) }) {
			return fmt.Errorf("%s is not a number", strconv.Quote(raw))
		}
		value = f
	case openapi3.TypeBoolean:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return fmt.Errorf("%s is not a boolean", strconv.Quote(raw))
		}
		value = b
	}
	if err := p.schema.Validate(value); err != nil {
		return errors.New(schemaMessage(err, value, nil, false))
	}
	return nil
}

var printer = message.NewPrinter(language.English)

// schemaMessage makes a schema validation error of the value doc one line: the JSON Pointer of the
// first failing value and what is wrong with it, without the value itself (it may be large) or the
// schema. nots names what each "not" forbids. A parameter, a single value, has no pointer.
func schemaMessage(err error, doc any, nots map[string]string, pointer bool) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return strings.Join(strings.Fields(err.Error()), " ")
	}
	var prefix, where string
	for len(ve.Causes) > 0 {
		if k, ok := ve.ErrorKind.(*kind.PropertyNames); ok && prefix == "" {
			// The causes are about the key as an instance of its own: name it, in its object.
			prefix, where = "key "+strconv.Quote(k.Property)+": ", keyObject(doc, ve.SchemaURL, k.Property)
		}
		ve = ve.Causes[0]
	}
	if prefix == "" {
		where = instancePointer(ve.InstanceLocation)
	}
	what := kindMessage(ve, nots)
	if !pointer {
		return what
	}
	return where + ": " + prefix + what
}

// keyObject is the pointer of the object whose key failed a propertyNames schema at schemaURL. The
// validator's own location of that error is not reliable (it shares a buffer it later overwrites), so
// the object is looked up: the object under the property the schema is for that has that key, when
// there is exactly one; else the property name alone.
func keyObject(doc any, schemaURL, key string) string {
	frag := strings.TrimSuffix(schemaURL, "/propertyNames")
	i := strings.LastIndex(frag, "/properties/")
	if i < 0 || strings.Contains(frag[i+len("/properties/"):], "/") {
		return "/"
	}
	prop, err := url.PathUnescape(frag[i+len("/properties/"):])
	if err != nil {
		return "/"
	}
	prop = strings.ReplaceAll(strings.ReplaceAll(prop, "~1", "/"), "~0", "~")
	var found [][]string
	var walk func(v any, loc []string)
	walk = func(v any, loc []string) {
		switch v := v.(type) {
		case map[string]any:
			if _, ok := v[key]; ok && len(loc) > 0 && loc[len(loc)-1] == prop {
				found = append(found, slices.Clone(loc))
			}
			for k, e := range v {
				walk(e, append(loc, k))
			}
		case []any:
			for i, e := range v {
				walk(e, append(loc, strconv.Itoa(i)))
			}
		}
	}
	walk(doc, nil)
	if len(found) == 1 {
		return instancePointer(found[0])
	}
	return strconv.Quote(prop)
}

// kindMessage says what is wrong, in the library's words but for the kinds where they would name the
// value, hide the key or print numbers with thousands separators.
func kindMessage(ve *jsonschema.ValidationError, nots map[string]string) string {
	var what string
	switch k := ve.ErrorKind.(type) {
	case *kind.Pattern:
		what = "does not match pattern " + strconv.Quote(k.Want)
	case *kind.AdditionalProperties:
		what = "unknown " + plural(len(k.Properties), "field ", "fields ") + quoteAll(k.Properties)
	case *kind.Required:
		what = "missing required " + plural(len(k.Missing), "field ", "fields ") + quoteAll(k.Missing)
	case *kind.Not:
		if msg, ok := nots[ve.SchemaURL+"/not"]; ok {
			what = msg
		} else {
			what = "matches a schema it must not (" + ve.SchemaURL + "/not)"
		}
	case *kind.Minimum:
		what = "must be >= " + ratString(k.Want) + ", got " + ratString(k.Got)
	case *kind.ExclusiveMinimum:
		what = "must be > " + ratString(k.Want) + ", got " + ratString(k.Got)
	case *kind.Maximum:
		what = "must be <= " + ratString(k.Want) + ", got " + ratString(k.Got)
	case *kind.ExclusiveMaximum:
		what = "must be < " + ratString(k.Want) + ", got " + ratString(k.Got)
	case *kind.MultipleOf:
		what = "must be a multiple of " + ratString(k.Want) + ", got " + ratString(k.Got)
	case *kind.MinLength:
		what = fmt.Sprintf("minLength: got %d characters, want at least %d", k.Got, k.Want)
	case *kind.MaxLength:
		what = fmt.Sprintf("maxLength: got %d characters, want at most %d", k.Got, k.Want)
	case *kind.MinItems:
		what = fmt.Sprintf("minItems: got %d items, want at least %d", k.Got, k.Want)
	case *kind.MaxItems:
		what = fmt.Sprintf("maxItems: got %d items, want at most %d", k.Got, k.Want)
	case *kind.MinProperties:
		what = fmt.Sprintf("minProperties: got %d fields, want at least %d", k.Got, k.Want)
	case *kind.MaxProperties:
		what = fmt.Sprintf("maxProperties: got %d fields, want at most %d", k.Got, k.Want)
	case *kind.UniqueItems:
		what = fmt.Sprintf("uniqueItems: items %d and %d are equal", k.Duplicates[0], k.Duplicates[1])
	default:
		what = ve.ErrorKind.LocalizedString(printer)
	}
	return strings.Join(strings.Fields(what), " ")
}

// ratString prints a number of a request plainly: an integer in full unless it is very long, else the
// nearest float64.
func ratString(r *big.Rat) string {
	if r.IsInt() && r.Num().BitLen() <= 64 {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// instancePointer is the JSON Pointer of a failing value, quoted when a client's key would make it
// ambiguous or break the line.
func instancePointer(loc []string) string {
	var b strings.Builder
	for _, tok := range loc {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1"))
	}
	p := b.String()
	if p == "" {
		return "/"
	}
	if strings.ContainsFunc(p, func(r rune) bool { return !strconv.IsPrint(r) || r == ' ' || r == ':' }) {
		return strconv.Quote(p)
	}
	return p
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func quoteAll(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}
