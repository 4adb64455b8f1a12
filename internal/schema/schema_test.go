package schema

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/api"
)

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

// TestCompileRefusesUnknownKeywords: a keyword the validator does not enforce is a compile error, never
// silently ignored.
func TestCompileRefusesUnknownKeywords(t *testing.T) {
	for _, schema := range []string{
		`{ type: string, format: uri }`,
		`{ type: number, multipleOf: 2 }`,
		`{ type: object, patternProperties: { "^x": {} } }`,
		`{ anyOf: [] }`,
		`{ type: object, dependentRequired: { a: [b] } }`,
		`{ type: array, prefixItems: [ { type: string } ] }`,
		`{ type: string, nullable: true }`,
		`{ type: object, properties: { a: { type: array, contains: {} } } }`,
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
	ops, err := d.Operations(Own)
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
		if _, err := d.Operations(Own); err == nil {
			t.Errorf("%s: compiled", param)
		}
	}
	d, err := Parse([]byte("paths:\n  /x:\n    post:\n      requestBody:\n        content:\n          text/plain: { schema: { type: string } }\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Operations(Own); err == nil {
		t.Error("a text/plain body compiled")
	}
}

// TestOperationsRawBody: a body of bytes a handler streams (no schema, or a binary string) compiles to
// RawBody with no validator, and mixed with JSON it is refused.
func TestOperationsRawBody(t *testing.T) {
	src := "paths:\n  /x:\n    put:\n      requestBody:\n        content:\n" +
		"          application/octet-stream: { schema: { type: string, format: binary } }\n" +
		"          application/x-tar: {}\n"
	d, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	ops, err := d.Operations(Own)
	if err != nil {
		t.Fatal(err)
	}
	op := ops["PUT /x"]
	if op.Body != nil || !slices.Equal(op.RawBody, []string{"application/octet-stream", "application/x-tar"}) {
		t.Fatalf("body %v, raw %v", op.Body, op.RawBody)
	}
	d, err = Parse([]byte("paths:\n  /x:\n    put:\n      requestBody:\n        content:\n" +
		"          application/octet-stream: {}\n          application/json: { schema: { type: object } }\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Operations(Own); err == nil {
		t.Error("a body both raw and JSON compiled")
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

// TestCombinatorsAndBounds: allOf, anyOf, oneOf, maxLength, maxItems, minProperties and maxProperties
// hold as JSON Schema 2020-12 says.
func TestCombinatorsAndBounds(t *testing.T) {
	for _, tc := range []struct {
		schema, value string
		ok            bool
	}{
		{`{ type: string, maxLength: 3 }`, `"abc"`, true},
		{`{ type: string, maxLength: 3 }`, `"abcd"`, false},
		{`{ type: string, maxLength: 1 }`, `"é"`, true},
		{`{ type: array, maxItems: 1 }`, `[1]`, true},
		{`{ type: array, maxItems: 1 }`, `[1, 2]`, false},
		{`{ type: object, minProperties: 1, maxProperties: 2 }`, `{}`, false},
		{`{ type: object, minProperties: 1, maxProperties: 2 }`, `{"a": 1}`, true},
		{`{ type: object, minProperties: 1, maxProperties: 2 }`, `{"a": 1, "b": 2, "c": 3}`, false},
		{`{ allOf: [ { type: integer }, { minimum: 2 } ] }`, `3`, true},
		{`{ allOf: [ { type: integer }, { minimum: 2 } ] }`, `1`, false},
		{`{ anyOf: [ { type: string }, { type: integer } ] }`, `1`, true},
		{`{ anyOf: [ { type: string }, { type: integer } ] }`, `true`, false},
		{`{ oneOf: [ { type: integer }, { minimum: 0 } ] }`, `-1`, true},
		{`{ oneOf: [ { type: integer }, { minimum: 0 } ] }`, `1`, false},
		{`{ oneOf: [ { type: integer }, { minimum: 0 } ] }`, `1.5`, true},
		{`{ oneOf: [ { type: integer }, { type: string } ] }`, `null`, false},
	} {
		d, err := Parse([]byte("components:\n  schemas:\n    S: " + tc.schema + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		s, err := d.Compile("#/components/schemas/S")
		if err != nil {
			t.Fatalf("%s: %v", tc.schema, err)
		}
		if err := s.Validate(decode(t, tc.value)); (err == nil) != tc.ok {
			t.Errorf("%s against %s: %v, want ok=%v", tc.value, tc.schema, err, tc.ok)
		}
	}
}
