package schema

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/api"
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

func compileTest(t *testing.T, name string) *Schema {
	t.Helper()
	d, err := Parse([]byte(testDoc))
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.Compile("#/components/schemas/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func decode(t *testing.T, src string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(src))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	return v
}

func TestValidate(t *testing.T) {
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
		{"Obj", `{"a":"1"}`, "/a: got string, want integer"},
		{"Tree", `{"kids":[{"kids":[{"kids":1}]}]}`, "/kids/0/kids/0/kids: got integer, want array"},
		{"Tree", `{"kids":[{"kids":[]}]}`, ""},
	} {
		err := compileTest(t, tc.schema).Validate(decode(t, tc.value))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%s %s: got %q, want %q", tc.schema, tc.value, got, tc.want)
		}
	}
}

// TestCompileRefusesUnknownKeywords: a keyword the validator does not enforce is a compile error, never
// silently ignored.
func TestCompileRefusesUnknownKeywords(t *testing.T) {
	for _, schema := range []string{
		`{ type: string, format: uri }`,
		`{ type: string, maxLength: 3 }`,
		`{ type: number, multipleOf: 2 }`,
		`{ type: object, patternProperties: { "^x": {} } }`,
		`{ anyOf: [ { type: string } ] }`,
		`{ type: string, nullable: true }`,
		`{ type: object, properties: { a: { type: array, maxItems: 1 } } }`,
		`{ $ref: "#/components/schemas/Other", minLength: 1 }`,
		`{ type: strin }`,
		`{ pattern: "(" }`,
		`{ $ref: "#/components/schemas/Missing" }`,
		`true`,
	} {
		src := "components:\n  schemas:\n    Other: { type: string }\n    S: " + schema + "\n"
		d, err := Parse([]byte(src))
		if err != nil {
			t.Fatalf("%s: %v", schema, err)
		}
		if _, err := d.Compile("#/components/schemas/S"); err == nil {
			t.Errorf("%s: compiled", schema)
		}
	}
}

// TestContractOperations: every operation of the embedded contract compiles, with the parameters and
// bodies the contract gives it.
func TestContractOperations(t *testing.T) {
	d, err := Parse(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := d.Operations()
	if err != nil {
		t.Fatal(err)
	}
	read := ops["GET /v1/sandboxes/{sandboxId}/files/content"]
	if read == nil || read.Body != nil || len(read.Params) != 3 {
		t.Fatalf("read file: %+v", read)
	}
	for i, want := range []string{"path sandboxId string", "query path string", "query expectedGeneration integer"} {
		p := read.Params[i]
		if got := p.In + " " + p.Name + " " + p.Type; got != want || !p.Required {
			t.Errorf("parameter %d: %s required %v, want %s required", i, got, p.Required, want)
		}
	}
	pause := ops["POST /v1/sandboxes/{sandboxId}/actions/pause"]
	if pause == nil || pause.Body == nil || !pause.Body.Required {
		t.Fatalf("pause: %+v", pause)
	}
	if err := pause.Body.Schema.Validate(decode(t, `{"expectedGeneration":0}`)); err == nil || err.Error() != "/expectedGeneration: must be >= 1, got 0" {
		t.Errorf("pause body: %v", err)
	}
	if ops["GET /healthz"] == nil || ops["GET /healthz"].Body != nil {
		t.Errorf("healthz: %+v", ops["GET /healthz"])
	}
}

// TestOperationsRefuseUnsupportedParameters: a serialization the validator does not decode is a compile
// error.
func TestOperationsRefuseUnsupportedParameters(t *testing.T) {
	for _, param := range []string{
		`{ in: header, name: X, schema: { type: string } }`,
		`{ in: query, name: q, style: deepObject, schema: { type: string } }`,
		`{ in: query, name: q, schema: { type: array, items: { type: string } } }`,
		`{ in: query, name: q, schema: { type: [string, integer] } }`,
		`{ in: query, name: q, content: { application/json: { schema: { type: string } } } }`,
	} {
		src := "paths:\n  /x:\n    get:\n      parameters:\n        - " + param + "\n"
		d, err := Parse([]byte(src))
		if err != nil {
			t.Fatalf("%s: %v", param, err)
		}
		if _, err := d.Operations(); err == nil {
			t.Errorf("%s: compiled", param)
		}
	}
	d, err := Parse([]byte("paths:\n  /x:\n    post:\n      requestBody:\n        content:\n          text/plain: { schema: { type: string } }\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Operations(); err == nil {
		t.Error("a text/plain body compiled")
	}
}

func TestInstancePointer(t *testing.T) {
	for _, tc := range []struct {
		path []string
		want string
	}{
		{nil, "/"},
		{[]string{"a", "0"}, "/a/0"},
		{[]string{"a/b~"}, "/a~1b~0"},
		{[]string{"a b"}, `"/a b"`},
		{[]string{"x\n"}, `"/x\n"`},
	} {
		if got := InstancePointer(tc.path); got != tc.want {
			t.Errorf("%q: got %s, want %s", tc.path, got, tc.want)
		}
	}
}

func BenchmarkValidateSandboxSpec(b *testing.B) {
	d, err := Parse(api.OpenAPI)
	if err != nil {
		b.Fatal(err)
	}
	s, err := d.Compile("#/components/schemas/SandboxSpec")
	if err != nil {
		b.Fatal(err)
	}
	src := []byte(`{"clientRequestId":"bench-1","image":"docker.io/library/alpine:3","resources":{"cpuMillis":500,"memoryMiB":256},"requiredCapabilities":["commandExecution","fileAccess"],"extensions":{"acme.tier":"gold"}}`)
	b.ReportAllocs()
	for b.Loop() {
		dec := json.NewDecoder(bytes.NewReader(src))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			b.Fatal(err)
		}
		if err := s.Validate(v); err != nil {
			b.Fatal(err)
		}
	}
}
