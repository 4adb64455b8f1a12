// Package plain is the library path of request validation: the contract's schemas compiled once by
// santhosh-tekuri/jsonschema/v6 (JSON Schema 2020-12, the dialect of OpenAPI 3.1) instead of package
// schema's own compiler, each refusal said with the same pointer and the same words. The daemon built
// with -tags plainschema validates with it, and the API's tests run the contract's suites on it as well
// as on package schema's (docs/design/request-validation.md). It is not linked into the default build:
// the library compiles the metaschemas of five drafts at package initialisation, which every process
// of the daemon's binary, every sandbox's agent among them, would pay at its start.
package plain

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/sandboxd/sandbox/internal/schema"
)

// resource is the URL the document is known by to the library.
const resource = "file:///contract.json"

// docCompiler is the library's compiler holding one document.
type docCompiler struct {
	mu  sync.Mutex // the library's Compiler is not safe for concurrent use
	doc *schema.Document
	c   *jsonschema.Compiler
}

// last is the compiler of the document compiled last: Operations compiles one document's schemas one
// after another.
var last struct {
	sync.Mutex
	dc *docCompiler
}

func compilerFor(d *schema.Document) (*docCompiler, error) {
	last.Lock()
	defer last.Unlock()
	if last.dc != nil && last.dc.doc == d {
		return last.dc, nil
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(resource, d.Root()); err != nil {
		return nil, fmt.Errorf("jsonschema: %w", err)
	}
	last.dc = &docCompiler{doc: d, c: c}
	return last.dc, nil
}

// Compile is a schema.Compiler: the schema at ptr, a "#/..." JSON Pointer of d, compiled by the
// library.
func Compile(d *schema.Document, ptr string) (schema.Validator, error) {
	frag, ok := strings.CutPrefix(ptr, "#")
	if !ok {
		return nil, fmt.Errorf("schema %q: only pointers inside the document are supported", ptr)
	}
	dc, err := compilerFor(d)
	if err != nil {
		return nil, err
	}
	s, err := dc.compile(resource + "#" + frag)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ptr, err)
	}
	return &validator{dc: dc, s: s, ptr: ptr}, nil
}

func (dc *docCompiler) compile(loc string) (*jsonschema.Schema, error) {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	return dc.c.Compile(loc)
}

// validator is one schema compiled by the library.
type validator struct {
	dc  *docCompiler
	s   *jsonschema.Schema
	ptr string
}

// Validate checks v and returns the rule package schema's validator would name first, in its words.
//
// The library dereferences a nil *big.Rat when a numeric keyword meets a number math/big does not parse
// (an exponent past its limit), so it cannot validate such a value at all. Package schema's validator
// refuses that number where a keyword compares it, in its place among the value's other refusals (a
// missing required field of the object holding it comes first); the value is handed to it, compiled
// from the same schema, rather than guessing that place from a partial answer.
func (v *validator) Validate(x any) (verr *schema.Error) {
	defer func() {
		if p := recover(); p != nil {
			if !unparsable(x) {
				panic(p)
			}
			own, err := v.dc.doc.Compile(v.ptr)
			if err != nil {
				panic(p)
			}
			verr = own.Validate(x)
		}
	}()
	err := v.s.Validate(x)
	if err == nil {
		return nil
	}
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return &schema.Error{Message: oneLine(err.Error())}
	}
	leaves := collect(ve, nil)
	for _, e := range leaves {
		if k, ok := e.ErrorKind.(*kind.PropertyNames); ok {
			// The library gives a propertyNames error a location that later members' validation
			// may overwrite (it shares the validator's own slice); find the object again.
			if path, ok := keyOwner(v.s, x, e.SchemaURL, k.Property, nil, 0); ok {
				e.InstanceLocation = path
			}
		}
	}
	slices.SortStableFunc(leaves, func(a, b *jsonschema.ValidationError) int { return order(x, a, b) })
	return v.dc.say(x, leaves[0])
}

// keyOwner is the path of the first object in x, in package schema's order, that s or a schema below it
// checks with the propertyNames schema at loc, and that has key.
func keyOwner(s *jsonschema.Schema, x any, loc, key string, path []string, depth int) ([]string, bool) {
	if s == nil || depth > 256 {
		return nil, false
	}
	for _, sub := range slices.Concat([]*jsonschema.Schema{s.Ref}, s.AllOf, s.AnyOf, s.OneOf) {
		if p, ok := keyOwner(sub, x, loc, key, path, depth+1); ok {
			return p, true
		}
	}
	switch v := x.(type) {
	case map[string]any:
		if _, has := v[key]; has && s.PropertyNames != nil && s.PropertyNames.Location == loc {
			return slices.Clone(path), true
		}
		for _, k := range slices.Sorted(maps.Keys(v)) {
			sub := s.Properties[k]
			if sub == nil {
				sub, _ = s.AdditionalProperties.(*jsonschema.Schema)
			}
			if p, ok := keyOwner(sub, v[k], loc, key, append(path, k), depth+1); ok {
				return p, true
			}
		}
	case []any:
		items := s.Items2020
		if items == nil {
			items, _ = s.Items.(*jsonschema.Schema)
		}
		for i, e := range v {
			if p, ok := keyOwner(items, e, loc, key, append(path, strconv.Itoa(i)), depth+1); ok {
				return p, true
			}
		}
	}
	return nil, false
}

// collect appends the errors of the tree that have no causes: those that name a rule. A
// propertyNames error is one, whatever its causes: the rule is the key's.
func collect(e *jsonschema.ValidationError, out []*jsonschema.ValidationError) []*jsonschema.ValidationError {
	if _, isKey := e.ErrorKind.(*kind.PropertyNames); len(e.Causes) == 0 || isKey {
		return append(out, e)
	}
	for _, c := range e.Causes {
		out = collect(c, out)
	}
	return out
}

// order sorts refusals as package schema's validator meets them: by where they are in the value, a
// value's own rules before its members' (and an array's items by index, an object's members by key),
// and at one value by the order it checks its rules in.
func order(x any, a, b *jsonschema.ValidationError) int {
	pa, pb := a.InstanceLocation, b.InstanceLocation
	cur := x
	for i := 0; i < len(pa) && i < len(pb); i++ {
		if pa[i] != pb[i] {
			if _, isArray := cur.([]any); isArray {
				ia, _ := strconv.Atoi(pa[i])
				ib, _ := strconv.Atoi(pb[i])
				return ia - ib
			}
			return strings.Compare(pa[i], pb[i])
		}
		cur = member(cur, pa[i])
	}
	if len(pa) != len(pb) {
		return len(pa) - len(pb)
	}
	if c := rank(a.ErrorKind) - rank(b.ErrorKind); c != 0 {
		return c
	}
	ka, _ := a.ErrorKind.(*kind.PropertyNames)
	kb, _ := b.ErrorKind.(*kind.PropertyNames)
	if ka != nil && kb != nil {
		return strings.Compare(ka.Property, kb.Property)
	}
	return 0
}

// rank is the place of a rule among those package schema checks on one value.
func rank(k jsonschema.ErrorKind) int {
	switch k.(type) {
	case *kind.Type:
		return 0
	case *kind.Const:
		return 1
	case *kind.Enum:
		return 2
	case *kind.Not:
		return 3
	case *kind.MinLength:
		return 4
	case *kind.Pattern:
		return 5
	case *kind.Minimum:
		return 6
	case *kind.Maximum:
		return 7
	case *kind.ExclusiveMinimum:
		return 8
	case *kind.ExclusiveMaximum:
		return 9
	case *kind.MinItems:
		return 10
	case *kind.UniqueItems:
		return 11
	case *kind.Required:
		return 12
	case *kind.PropertyNames:
		return 13
	case *kind.AdditionalProperties:
		return 14
	}
	return 20
}

// say is the refusal e of the value x as package schema's validator words it.
func (dc *docCompiler) say(x any, e *jsonschema.ValidationError) *schema.Error {
	path := slices.Clone(e.InstanceLocation)
	if len(path) == 0 {
		path = nil
	}
	val := at(x, path)
	ptr := pointerOf(e.SchemaURL)
	raw, _ := dc.doc.Lookup(ptr)
	rawMap, _ := raw.(map[string]any)
	msg := ""
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		msg = schema.TypeMessage(val, typeNames(rawMap["type"], k.Want))
	case *kind.Const:
		msg = schema.ConstMessage(rawMap["const"])
	case *kind.Enum:
		list, _ := rawMap["enum"].([]any)
		msg = schema.EnumMessage(list)
	case *kind.Not:
		msg = schema.NotMessage(rawMap["not"], schema.Pointer(ptr, "not"))
	case *kind.MinLength:
		msg = schema.MinLengthMessage(k.Got, k.Want)
	case *kind.Pattern:
		msg = schema.PatternMessage(k.Want)
	case *kind.Minimum:
		msg = schema.BoundMessage(">=", k.Want, number(val))
	case *kind.Maximum:
		msg = schema.BoundMessage("<=", k.Want, number(val))
	case *kind.ExclusiveMinimum:
		msg = schema.BoundMessage(">", k.Want, number(val))
	case *kind.ExclusiveMaximum:
		msg = schema.BoundMessage("<", k.Want, number(val))
	case *kind.MinItems:
		msg = schema.MinItemsMessage(k.Got, k.Want)
	case *kind.UniqueItems:
		msg = schema.UniqueItemsMessage(k.Duplicates[0], k.Duplicates[1])
	case *kind.Required:
		msg = schema.RequiredMessage(k.Missing)
	case *kind.AdditionalProperties:
		msg = schema.UnknownMessage(slices.Sorted(slices.Values(k.Properties)))
	case *kind.PropertyNames:
		msg = schema.KeyMessage(k.Property, dc.keyMessage(e.SchemaURL, k.Property))
	default:
		msg = oneLine(k.LocalizedString(printer))
	}
	return &schema.Error{Path: path, Message: msg}
}

var printer = message.NewPrinter(language.English)

// keyMessage is what the propertyNames schema at loc says of key.
func (dc *docCompiler) keyMessage(loc, key string) string {
	s, err := dc.compile(loc)
	if err != nil {
		return "does not match the schema of its keys"
	}
	err = s.Validate(key)
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return "does not match the schema of its keys"
	}
	leaves := collect(ve, nil)
	slices.SortStableFunc(leaves, func(a, b *jsonschema.ValidationError) int { return order(key, a, b) })
	return dc.say(key, leaves[0]).Message
}

// pointerOf is the "#/..." JSON Pointer of an absolute schema location of the document.
func pointerOf(loc string) string {
	_, frag, _ := strings.Cut(loc, "#")
	if f, err := url.PathUnescape(frag); err == nil {
		frag = f
	}
	return "#" + frag
}

// typeNames are the types a schema's "type" names, in its order; want, the library's, when it has none.
func typeNames(raw any, want []string) []string {
	switch t := raw.(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, e := range t {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return want
}

// member is the member tok of an object or the item tok of an array, or nil.
func member(v any, tok string) any {
	switch c := v.(type) {
	case map[string]any:
		return c[tok]
	case []any:
		if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(c) {
			return c[i]
		}
	}
	return nil
}

// at is the value at path in x.
func at(x any, path []string) any {
	for _, tok := range path {
		x = member(x, tok)
	}
	return x
}

func number(v any) json.Number {
	if n, ok := v.(json.Number); ok {
		return n
	}
	return json.Number(fmt.Sprint(v))
}

// unparsable reports whether x holds a number math/big does not parse.
func unparsable(x any) bool {
	switch v := x.(type) {
	case json.Number:
		_, ok := new(big.Rat).SetString(string(v))
		return !ok
	case []any:
		return slices.ContainsFunc(v, unparsable)
	case map[string]any:
		for _, e := range v {
			if unparsable(e) {
				return true
			}
		}
	}
	return false
}

// oneLine folds any run of white space, line breaks included, into one space.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
