package schema_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/schema"
	"github.com/sandboxd/sandbox/internal/schema/plain"
)

// testDoc is a document with a schema for each supported keyword, under #/components/schemas.
const testDoc = `
components:
  schemas:
    Nullable: { type: [integer, "null"] }
    Const: { const: ok }
    Enum: { enum: [a, 1, null] }
    Range: { type: number, minimum: -1.5, maximum: 10, exclusiveMinimum: -2, exclusiveMaximum: 10.5 }
    Exclusive: { type: number, exclusiveMinimum: 0, exclusiveMaximum: 1 }
    Str: { type: string, minLength: 2, pattern: "^[a-z]+$", description: annotation, contentEncoding: base64 }
    List: { type: array, minItems: 1, uniqueItems: true, items: { $ref: "#/components/schemas/Nullable" } }
    Obj:
      type: object
      additionalProperties: false
      required: [a]
      not: { required: [b, c] }
      properties:
        a: { type: integer }
        b: { type: string }
        c: { type: string }
        m: { type: object, additionalProperties: { type: boolean }, propertyNames: { pattern: "^x" } }
    Tree:
      type: object
      properties:
        kids: { type: array, items: { $ref: "#/components/schemas/Tree" } }
`

// compilers are the two ways of compiling a schema: this package's and the library's.
var compilers = []struct {
	name    string
	compile schema.Compiler
}{{"own", schema.Own}, {"plain", plain.Compile}}

func compileTest(t *testing.T, compile schema.Compiler, name string) schema.Validator {
	t.Helper()
	d, err := schema.Parse([]byte(testDoc))
	if err != nil {
		t.Fatal(err)
	}
	s, err := compile(d, "#/components/schemas/"+name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func decode(t testing.TB, src string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(src))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	return v
}

// TestValidate: both compilers accept the same values and refuse the others with the same pointer and
// message.
func TestValidate(t *testing.T) {
	for _, c := range compilers {
		t.Run(c.name, func(t *testing.T) { testValidate(t, c.compile) })
	}
}

func testValidate(t *testing.T, compile schema.Compiler) {
	for _, tc := range []struct {
		schema, value string
		want          string // "" valid, else the whole "pointer: message"
	}{
		{"Nullable", `null`, ""},
		{"Nullable", `3`, ""},
		{"Nullable", `3.0`, ""},
		{"Nullable", `1e3`, ""},
		{"Nullable", `1e400`, ""},
		{"Nullable", `1.5`, "/: got number, want integer or null"},
		{"Nullable", `"3"`, "/: got string, want integer or null"},
		{"Nullable", `1e2000000`, "/: got number, want integer or null"},
		{"Const", `"ok"`, ""},
		{"Const", `"OK"`, `/: value must be "ok"`},
		{"Enum", `1.0`, ""},
		{"Enum", `null`, ""},
		{"Enum", `"b"`, `/: value must be one of "a", 1, null`},
		{"Range", `-1.5`, ""},
		{"Range", `10`, ""},
		{"Range", `-1.6`, "/: must be >= -1.5, got -1.6"},
		{"Range", `10.000000000000000000001`, "/: must be <= 10, got 10.000000000000000000001"},
		{"Exclusive", `1e-300`, ""},
		{"Exclusive", `0`, "/: must be > 0, got 0"},
		{"Exclusive", `0.99999999999999999999`, ""},
		{"Exclusive", `1`, "/: must be < 1, got 1"},
		{"Exclusive", `1e9999999`, "/: number out of the range this API accepts"},
		{"Str", `"ab"`, ""},
		{"Str", `"é"`, "/: minLength: got 1 characters, want at least 2"},
		{"Str", `"aB"`, `/: does not match pattern "^[a-z]+$"`},
		{"Str", `7`, "/: got integer, want string"},
		{"List", `[1, null]`, ""},
		{"List", `[]`, "/: minItems: got 0 items, want at least 1"},
		{"List", `[1, 1.0]`, "/: uniqueItems: items 0 and 1 are equal"},
		{"List", `[1, "x"]`, "/1: got string, want integer or null"},
		{"Obj", `{"a":1,"b":"x","m":{"x1":true}}`, ""},
		{"Obj", `{}`, `/: missing required field "a"`},
		{"Obj", `{"a":1,"z":1,"y":2}`, `/: unknown fields "y", "z"`},
		{"Obj", `{"a":1,"b":"x","c":"y"}`, "/: b and c cannot both be set"},
		{"Obj", `{"a":1,"m":{"x":1}}`, "/m/x: got integer, want boolean"},
		{"Obj", `{"a":1,"m":{"y":true}}`, `/m: key "y": does not match pattern "^x"`},
		{"Obj", `{"a":1,"b":"x","m":{"x":true},"n":1}`, `/: unknown field "n"`},
		{"Obj", `{"b":"x","m":{"y":true},"a":1}`, `/m: key "y": does not match pattern "^x"`},
		{"Obj", `{"a":"1"}`, "/a: got string, want integer"},
		{"Tree", `{"kids":[{"kids":[{"kids":1}]}]}`, "/kids/0/kids/0/kids: got integer, want array"},
		{"Tree", `{"kids":[{"kids":[]}]}`, ""},
	} {
		err := compileTest(t, compile, tc.schema).Validate(decode(t, tc.value))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%s %s: got %q, want %q", tc.schema, tc.value, got, tc.want)
		}
	}
}
