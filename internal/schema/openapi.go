package schema

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Operation is the request side of one OpenAPI operation, compiled.
type Operation struct {
	Method string // upper case
	Path   string // as in the document, with {param}
	// Params are the path item's parameters, then the operation's, in the document's order; an
	// operation's parameter replaces the path item's of the same name and place.
	Params []*Param
	Body   *Body // nil: the operation takes no JSON request body
	// RawBody lists the media types of a body the operation's handler streams itself (a file's bytes,
	// a tar stream) instead of a JSON document validated here; nil for a JSON body or none.
	RawBody []string
}

// Param is a path or query parameter serialized the default way (simple in a path, form in a query)
// with a schema of one primitive type.
type Param struct {
	In, Name        string // In is "path" or "query"
	Required        bool
	AllowEmptyValue bool
	Type            string // "string", "integer", "number" or "boolean"
	Schema          Validator
}

// Body is an application/json request body.
type Body struct {
	Required bool
	Schema   Validator
}

// Validator is one compiled schema: immutable, safe for concurrent use.
type Validator interface {
	// Validate checks v, a value as encoding/json with UseNumber decodes it, and returns the first
	// rule it breaks, or nil.
	Validate(v any) *Error
}

// Compiler compiles the schema at a "#/..." JSON Pointer of d. Own is this package's; package plain's
// compiles with a JSON Schema library instead.
type Compiler func(d *Document, ptr string) (Validator, error)

// Own is this package's Compiler: Compile.
func Own(d *Document, ptr string) (Validator, error) {
	s, err := d.Compile(ptr)
	if err != nil {
		return nil, err
	}
	return s, nil
}

var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// Operations compiles the request side of every operation of an OpenAPI 3.1 document with compile,
// keyed by "METHOD /path/{param}". It fails on anything it would not enforce: a parameter that is not a
// path or query one of a primitive type, a body that is not JSON, a schema compile refuses (Own refuses
// a keyword it does not know).
func (d *Document) Operations(compile Compiler) (map[string]*Operation, error) {
	paths, ok := d.root.(map[string]any)["paths"].(map[string]any)
	if !ok {
		return nil, errors.New("schema: the document has no paths")
	}
	out := map[string]*Operation{}
	for path, raw := range paths {
		itemPtr := Pointer("#/paths", path)
		item, itemPtr, err := d.Deref(raw, itemPtr)
		if err != nil {
			return nil, err
		}
		for _, method := range methods {
			raw, ok := item[method]
			if !ok {
				continue
			}
			opPtr := Pointer(itemPtr, method)
			op, ok := raw.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s: not an object", opPtr)
			}
			o, err := d.operation(compile, item, itemPtr, op, opPtr)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", strings.ToUpper(method), path, err)
			}
			o.Method, o.Path = strings.ToUpper(method), path
			out[o.Method+" "+path] = o
		}
	}
	return out, nil
}

func (d *Document) operation(compile Compiler, item map[string]any, itemPtr string, op map[string]any, opPtr string) (*Operation, error) {
	o := &Operation{}
	own, err := d.params(compile, op, opPtr)
	if err != nil {
		return nil, err
	}
	inherited, err := d.params(compile, item, itemPtr)
	if err != nil {
		return nil, err
	}
	for _, p := range inherited {
		if !slices.ContainsFunc(own, func(q *Param) bool { return q.In == p.In && q.Name == p.Name }) {
			o.Params = append(o.Params, p)
		}
	}
	o.Params = append(o.Params, own...)
	if raw, ok := op["requestBody"]; ok {
		rb, ptr, err := d.Deref(raw, Pointer(opPtr, "requestBody"))
		if err != nil {
			return nil, err
		}
		content, _ := rb["content"].(map[string]any)
		if raw := rawMediaTypes(content); raw != nil {
			o.RawBody = raw
			return o, nil
		}
		media, _ := content["application/json"].(map[string]any)
		if len(content) != 1 || media == nil || media["schema"] == nil {
			return nil, errors.New("a request body must have exactly one media type, application/json, with a schema")
		}
		for k := range media {
			if k != "schema" && !annotations[k] {
				return nil, fmt.Errorf("request body: media type field %q is not supported", k)
			}
		}
		s, err := compile(d, Pointer(ptr, "content", "application/json", "schema"))
		if err != nil {
			return nil, err
		}
		required, _ := rb["required"].(bool)
		o.Body = &Body{Required: required, Schema: s}
	}
	return o, nil
}

// rawMediaTypes returns the media types of a request body that is no JSON document but bytes its
// handler streams (a file, a tar stream), sorted; nil unless every media type says so, with no schema
// or a binary string one (OpenAPI 3.1's "format: binary" or "contentMediaType"). A text body with a
// schema to check is not raw: this package would not enforce it.
func rawMediaTypes(content map[string]any) []string {
	var out []string
	for mt, raw := range content {
		media, _ := raw.(map[string]any)
		if media == nil {
			return nil
		}
		if sch, ok := media["schema"]; ok {
			m, _ := sch.(map[string]any)
			if m["type"] != "string" || (m["format"] != "binary" && m["contentMediaType"] == nil) {
				return nil
			}
		}
		out = append(out, mt)
	}
	slices.Sort(out)
	return out
}

// params compiles the "parameters" list of a path item or an operation.
func (d *Document) params(compile Compiler, holder map[string]any, ptr string) ([]*Param, error) {
	raw, ok := holder["parameters"]
	if !ok {
		return nil, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("%s/parameters: not a list", ptr)
	}
	var out []*Param
	for i, e := range list {
		m, mptr, err := d.Deref(e, fmt.Sprintf("%s/parameters/%d", ptr, i))
		if err != nil {
			return nil, err
		}
		p, err := d.param(compile, m, mptr)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func (d *Document) param(compile Compiler, m map[string]any, ptr string) (*Param, error) {
	p := &Param{}
	p.In, _ = m["in"].(string)
	p.Name, _ = m["name"].(string)
	p.Required, _ = m["required"].(bool)
	p.AllowEmptyValue, _ = m["allowEmptyValue"].(bool)
	if p.In != "path" && p.In != "query" {
		return nil, fmt.Errorf("parameter %q: only path and query parameters are supported, not %q", p.Name, p.In)
	}
	for k := range m {
		switch k {
		case "in", "name", "required", "allowEmptyValue", "schema", "description", "deprecated", "example", "examples":
		default:
			// style, explode, content, allowReserved: serializations this validator does not decode.
			if !strings.HasPrefix(k, "x-") {
				return nil, fmt.Errorf("parameter %q: only a schema with the default style is supported, not %q", p.Name, k)
			}
		}
	}
	raw, ok := m["schema"]
	if !ok {
		return nil, fmt.Errorf("parameter %q: no schema", p.Name)
	}
	sptr := Pointer(ptr, "schema")
	s, err := compile(d, sptr)
	if err != nil {
		return nil, err
	}
	sm, _, err := d.Deref(raw, sptr)
	if err != nil {
		return nil, fmt.Errorf("parameter %q: %w", p.Name, err)
	}
	switch t := sm["type"].(type) {
	case string:
		p.Type = t
	case []any:
		if len(t) == 1 {
			p.Type, _ = t[0].(string)
		}
	}
	switch p.Type {
	case "string", "integer", "number", "boolean":
	case "":
		return nil, fmt.Errorf("parameter %q: only a schema of one type is supported", p.Name)
	default:
		return nil, fmt.Errorf("parameter %q: type %s is not supported", p.Name, p.Type)
	}
	p.Schema = s
	return p, nil
}
