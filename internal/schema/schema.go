// Package schema validates request values against the JSON Schema 2020-12 subset an OpenAPI 3.1
// document uses for its requests. A Document is the parsed YAML with "#/..." references resolved;
// Compile turns one schema of it into an immutable validator tree once, and Validate runs only that
// tree. Invariant: every keyword of a compiled schema is either enforced exactly as JSON Schema 2020-12
// says or is a pure annotation; any other keyword makes Compile fail, so a contract change can never
// silently drop a rule.
package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v4"
)

// Document is a parsed OpenAPI (or JSON Schema) document. It is immutable after Parse.
type Document struct {
	root  any
	cache map[string]*Schema // compiled schemas by JSON Pointer, so that references share one tree
}

// Parse reads a YAML (or JSON) document.
func Parse(src []byte) (*Document, error) {
	var root any
	if err := yaml.Unmarshal(src, &root); err != nil {
		return nil, err
	}
	if _, ok := root.(map[string]any); !ok {
		return nil, errors.New("schema: the document is not an object")
	}
	return &Document{root: root, cache: map[string]*Schema{}}, nil
}

// Root is the parsed document, as YAML decodes it; it must not be changed.
func (d *Document) Root() any { return d.root }

// Lookup returns the value at a "#/..." JSON Pointer of the document.
func (d *Document) Lookup(ptr string) (any, error) {
	frag, ok := strings.CutPrefix(ptr, "#")
	if !ok {
		return nil, fmt.Errorf("reference %q: only references inside the document are supported", ptr)
	}
	cur := d.root
	if frag == "" {
		return cur, nil
	}
	if !strings.HasPrefix(frag, "/") {
		return nil, fmt.Errorf("reference %q: not a JSON Pointer", ptr)
	}
	for _, tok := range strings.Split(frag[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, fmt.Errorf("reference %q: %q not found", ptr, tok)
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, fmt.Errorf("reference %q: no item %q", ptr, tok)
			}
			cur = c[i]
		default:
			return nil, fmt.Errorf("reference %q: %q is not inside an object or array", ptr, tok)
		}
	}
	return cur, nil
}

// Deref follows the "$ref" of an object (an OpenAPI reference object or a JSON Schema reference) until
// it reaches one without, and returns it with its own pointer.
func (d *Document) Deref(v any, ptr string) (map[string]any, string, error) {
	for range 32 {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, ptr, fmt.Errorf("%s: not an object", ptr)
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return m, ptr, nil
		}
		var err error
		if v, err = d.Lookup(ref); err != nil {
			return nil, ptr, err
		}
		ptr = ref
	}
	return nil, ptr, fmt.Errorf("%s: too many nested references", ptr)
}

// Pointer appends escaped tokens to a JSON Pointer.
func Pointer(base string, tokens ...string) string {
	var b strings.Builder
	b.WriteString(base)
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

// Schema is one compiled schema: immutable, safe for concurrent use.
type Schema struct {
	ptr   string // where it is in the document, for messages
	types []string
	// typeMask is the set of the JSON types types allows; 0 when the schema has no type.
	typeMask typeSet

	properties    map[string]*Schema
	required      []string
	noAdditional  bool    // additionalProperties: false
	additional    *Schema // additionalProperties: a schema
	propertyNames *Schema

	items       *Schema
	minItems    int // -1: none
	maxItems    int // -1: none
	uniqueItems bool

	minProperties, maxProperties int // -1: none

	allOf, anyOf, oneOf []*Schema

	enum     []any // json.Number for numbers
	hasConst bool
	constV   any

	not        *Schema
	notMessage string

	minLength int // -1: none
	maxLength int // -1: none
	pattern   *regexp.Regexp

	minimum, maximum, exclusiveMinimum, exclusiveMaximum *bound
}

// annotations are the keywords that assert nothing in JSON Schema 2020-12 (contentEncoding and
// contentMediaType included: they are annotations unless a validator opts in to asserting content).
var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "example": true,
	"deprecated": true, "readOnly": true, "writeOnly": true, "$comment": true,
	"contentEncoding": true, "contentMediaType": true,
}

// Compile compiles the schema at ptr ("#/components/schemas/X", or any pointer to a schema object).
// It fails on any keyword it does not enforce and that is not an annotation.
func (d *Document) Compile(ptr string) (*Schema, error) {
	v, err := d.Lookup(ptr)
	if err != nil {
		return nil, err
	}
	return d.compile(v, ptr)
}

func (d *Document) compile(v any, ptr string) (*Schema, error) {
	m, ok := v.(map[string]any)
	if !ok {
		// Boolean schemas are not used by the contract's requests; refuse rather than guess.
		return nil, fmt.Errorf("%s: a schema must be an object, not %T", ptr, v)
	}
	if ref, ok := m["$ref"].(string); ok {
		for k := range m {
			if k != "$ref" && !annotations[k] && !strings.HasPrefix(k, "x-") {
				return nil, fmt.Errorf("%s: keyword %q next to $ref is not supported", ptr, k)
			}
		}
		if s, ok := d.cache[ref]; ok {
			return s, nil
		}
		target, err := d.Lookup(ref)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ptr, err)
		}
		s := &Schema{}
		d.cache[ref] = s // a recursive reference finds the schema being compiled
		c, err := d.compile(target, ref)
		if err != nil {
			delete(d.cache, ref)
			return nil, err
		}
		*s = *c
		return s, nil
	}
	s := &Schema{ptr: ptr, minItems: -1, maxItems: -1, minLength: -1, maxLength: -1, minProperties: -1, maxProperties: -1}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := d.keyword(s, k, m[k], ptr); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", ptr, k, err)
		}
	}
	return s, nil
}

// keyword compiles one keyword of a schema object into s.
func (d *Document) keyword(s *Schema, k string, v any, ptr string) error {
	var err error
	switch k {
	case "type":
		switch t := v.(type) {
		case string:
			s.types = []string{t}
		case []any:
			for _, e := range t {
				name, ok := e.(string)
				if !ok {
					return errors.New("not a list of type names")
				}
				s.types = append(s.types, name)
			}
		default:
			return errors.New("not a type name or a list of them")
		}
		for _, name := range s.types {
			bit, ok := typeBits[name]
			if !ok {
				return fmt.Errorf("unknown type %q", name)
			}
			s.typeMask |= bit
		}
	case "properties":
		props, ok := v.(map[string]any)
		if !ok {
			return errors.New("not an object")
		}
		s.properties = make(map[string]*Schema, len(props))
		for name, sub := range props {
			if s.properties[name], err = d.compile(sub, Pointer(ptr, k, name)); err != nil {
				return err
			}
		}
	case "required":
		list, ok := v.([]any)
		if !ok {
			return errors.New("not a list")
		}
		for _, e := range list {
			name, ok := e.(string)
			if !ok {
				return errors.New("not a list of names")
			}
			s.required = append(s.required, name)
		}
	case "additionalProperties":
		if b, ok := v.(bool); ok {
			s.noAdditional = !b
			return nil
		}
		s.additional, err = d.compile(v, Pointer(ptr, k))
	case "propertyNames":
		s.propertyNames, err = d.compile(v, Pointer(ptr, k))
	case "items":
		s.items, err = d.compile(v, Pointer(ptr, k))
	case "minItems":
		s.minItems, err = count(v)
	case "minLength":
		s.minLength, err = count(v)
	case "maxLength":
		s.maxLength, err = count(v)
	case "maxItems":
		s.maxItems, err = count(v)
	case "minProperties":
		s.minProperties, err = count(v)
	case "maxProperties":
		s.maxProperties, err = count(v)
	case "allOf", "anyOf", "oneOf":
		list, ok := v.([]any)
		if !ok || len(list) == 0 {
			return errors.New("not a non-empty list of schemas")
		}
		var subs []*Schema
		for i, e := range list {
			sub, err := d.compile(e, Pointer(ptr, k, strconv.Itoa(i)))
			if err != nil {
				return err
			}
			subs = append(subs, sub)
		}
		switch k {
		case "allOf":
			s.allOf = subs
		case "anyOf":
			s.anyOf = subs
		default:
			s.oneOf = subs
		}
	case "uniqueItems":
		b, ok := v.(bool)
		if !ok {
			return errors.New("not a boolean")
		}
		s.uniqueItems = b
	case "enum":
		list, ok := v.([]any)
		if !ok || len(list) == 0 {
			return errors.New("not a non-empty list")
		}
		for _, e := range list {
			s.enum = append(s.enum, normalize(e))
		}
	case "const":
		s.hasConst, s.constV = true, normalize(v)
	case "not":
		if s.not, err = d.compile(v, Pointer(ptr, k)); err != nil {
			return err
		}
		s.notMessage = NotMessage(v, Pointer(ptr, k))
	case "pattern":
		p, ok := v.(string)
		if !ok {
			return errors.New("not a string")
		}
		s.pattern, err = regexp.Compile(p)
	case "minimum":
		s.minimum, err = newBound(v)
	case "maximum":
		s.maximum, err = newBound(v)
	case "exclusiveMinimum":
		s.exclusiveMinimum, err = newBound(v)
	case "exclusiveMaximum":
		s.exclusiveMaximum, err = newBound(v)
	default:
		if !annotations[k] && !strings.HasPrefix(k, "x-") {
			return errors.New("keyword not supported by this validator")
		}
	}
	return err
}

func count(v any) (int, error) {
	switch n := v.(type) {
	case int:
		if n >= 0 {
			return n, nil
		}
	case uint64:
		if n <= math.MaxInt32 {
			return int(n), nil
		}
	case float64:
		if n >= 0 && n == math.Trunc(n) && n <= math.MaxInt32 {
			return int(n), nil
		}
	}
	return 0, errors.New("not a non-negative integer")
}

// normalize makes a YAML value a JSON value as encoding/json with UseNumber gives it.
func normalize(v any) any {
	switch v := v.(type) {
	case int:
		return json.Number(strconv.Itoa(v))
	case int64:
		return json.Number(strconv.FormatInt(v, 10))
	case uint64:
		return json.Number(strconv.FormatUint(v, 10))
	case float64:
		return json.Number(strconv.FormatFloat(v, 'g', -1, 64))
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = normalize(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = normalize(e)
		}
		return out
	}
	return v
}

// typeSet is a set of JSON Schema type names.
type typeSet uint8

const (
	tNull typeSet = 1 << iota
	tBoolean
	tString
	tNumber
	tInteger
	tArray
	tObject
)

var typeBits = map[string]typeSet{
	"null": tNull, "boolean": tBoolean, "string": tString, "number": tNumber,
	"integer": tInteger, "array": tArray, "object": tObject,
}

// typeName is the JSON type of a decoded value, as a message names it.
func typeName(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if isInteger(v) {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// typeOK reports whether v is of one of the types of mask; an integer is a number, and a number is an
// integer when its value is (1.0 is).
func typeOK(v any, mask typeSet) bool {
	switch v := v.(type) {
	case nil:
		return mask&tNull != 0
	case bool:
		return mask&tBoolean != 0
	case string:
		return mask&tString != 0
	case json.Number:
		return mask&tNumber != 0 || mask&tInteger != 0 && isInteger(v)
	case []any:
		return mask&tArray != 0
	case map[string]any:
		return mask&tObject != 0
	}
	return false
}

// Error is a value that does not match a schema: where it is and which rule it breaks, in one line.
type Error struct {
	// Path is the location of the failing value in the validated one, as JSON Pointer tokens; for a
	// propertyNames rule it is the object holding the key.
	Path []string
	// Message names the rule and what is wrong, without the value itself.
	Message string
}

func (e *Error) Error() string { return InstancePointer(e.Path) + ": " + e.Message }

// InstancePointer is the JSON Pointer of path, quoted when a client's key would make it ambiguous or
// break the line.
func InstancePointer(path []string) string {
	p := Pointer("", path...)
	if p == "" {
		return "/"
	}
	if strings.ContainsFunc(p, func(r rune) bool { return !strconv.IsPrint(r) || r == ' ' || r == ':' }) {
		return strconv.Quote(p)
	}
	return p
}

// Validate checks v, a value as encoding/json with UseNumber decodes it (nil, bool, string,
// json.Number, []any, map[string]any), and returns the first rule it breaks, or nil.
func (s *Schema) Validate(v any) *Error {
	return s.validate(v, nil)
}

func (s *Schema) validate(v any, path []string) *Error {
	fail := func(message string) *Error {
		return &Error{Path: slices.Clone(path), Message: message}
	}
	if s.typeMask != 0 && !typeOK(v, s.typeMask) {
		return fail(TypeMessage(v, s.types))
	}
	if s.hasConst && !equal(v, s.constV) {
		return fail(ConstMessage(s.constV))
	}
	if s.enum != nil && !slices.ContainsFunc(s.enum, func(e any) bool { return equal(v, e) }) {
		return fail(EnumMessage(s.enum))
	}
	if s.not != nil && s.not.validate(v, path) == nil {
		return fail(s.notMessage)
	}
	for _, sub := range s.allOf {
		if err := sub.validate(v, path); err != nil {
			return err
		}
	}
	if s.anyOf != nil && !slices.ContainsFunc(s.anyOf, func(sub *Schema) bool { return sub.validate(v, path) == nil }) {
		return fail(fmt.Sprintf("anyOf: matches none of the %d alternatives", len(s.anyOf)))
	}
	if s.oneOf != nil {
		n := 0
		for _, sub := range s.oneOf {
			if sub.validate(v, path) == nil {
				n++
			}
		}
		if n != 1 {
			return fail(fmt.Sprintf("oneOf: matches %d of the %d alternatives, want exactly one", n, len(s.oneOf)))
		}
	}
	switch v := v.(type) {
	case string:
		if s.minLength >= 0 && utf8.RuneCountInString(v) < s.minLength {
			return fail(MinLengthMessage(utf8.RuneCountInString(v), s.minLength))
		}
		if s.maxLength >= 0 && utf8.RuneCountInString(v) > s.maxLength {
			return fail(fmt.Sprintf("maxLength: got %d characters, want at most %d", utf8.RuneCountInString(v), s.maxLength))
		}
		if s.pattern != nil && !s.pattern.MatchString(v) {
			return fail(PatternMessage(s.pattern.String()))
		}
	case json.Number:
		return s.validateNumber(v, path)
	case []any:
		return s.validateArray(v, path)
	case map[string]any:
		return s.validateObject(v, path)
	}
	return nil
}

func (s *Schema) validateArray(v []any, path []string) *Error {
	if s.minItems >= 0 && len(v) < s.minItems {
		return &Error{Path: slices.Clone(path), Message: MinItemsMessage(len(v), s.minItems)}
	}
	if s.maxItems >= 0 && len(v) > s.maxItems {
		return &Error{Path: slices.Clone(path), Message: fmt.Sprintf("maxItems: got %d items, want at most %d", len(v), s.maxItems)}
	}
	if s.uniqueItems {
		for i := 1; i < len(v); i++ {
			for j := range i {
				if equal(v[i], v[j]) {
					return &Error{Path: slices.Clone(path), Message: UniqueItemsMessage(j, i)}
				}
			}
		}
	}
	if s.items != nil {
		for i, e := range v {
			if err := s.items.validate(e, append(path, strconv.Itoa(i))); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Schema) validateObject(v map[string]any, path []string) *Error {
	var missing []string
	for _, name := range s.required {
		if _, ok := v[name]; !ok {
			missing = append(missing, name)
		}
	}
	if missing != nil {
		return &Error{Path: slices.Clone(path), Message: RequiredMessage(missing)}
	}
	if s.minProperties >= 0 && len(v) < s.minProperties {
		return &Error{Path: slices.Clone(path), Message: fmt.Sprintf("minProperties: got %d properties, want at least %d", len(v), s.minProperties)}
	}
	if s.maxProperties >= 0 && len(v) > s.maxProperties {
		return &Error{Path: slices.Clone(path), Message: fmt.Sprintf("maxProperties: got %d properties, want at most %d", len(v), s.maxProperties)}
	}
	checkKeys := s.noAdditional || s.additional != nil || s.propertyNames != nil
	if !checkKeys && s.properties == nil {
		return nil
	}
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the first error is the same on every run
	if s.propertyNames != nil {
		for _, k := range keys {
			if err := s.propertyNames.validate(k, nil); err != nil {
				return &Error{Path: slices.Clone(path), Message: KeyMessage(k, err.Message)}
			}
		}
	}
	if s.noAdditional {
		var unknown []string
		for _, k := range keys {
			if _, ok := s.properties[k]; !ok {
				unknown = append(unknown, k)
			}
		}
		if unknown != nil {
			return &Error{Path: slices.Clone(path), Message: UnknownMessage(unknown)}
		}
	}
	for _, k := range keys {
		sub := s.properties[k]
		if sub == nil {
			sub = s.additional
		}
		if sub != nil {
			if err := sub.validate(v[k], append(path, k)); err != nil {
				return err
			}
		}
	}
	return nil
}
