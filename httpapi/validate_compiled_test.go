package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
	"github.com/sandboxd/sandbox/internal/jsondoc"
	"github.com/sandboxd/sandbox/internal/schema/plain"
)

const (
	opCreate   = "POST /v1/sandboxes"
	opGet      = "GET /v1/sandboxes/{sandboxId}"
	opPause    = "POST /v1/sandboxes/{sandboxId}/actions/pause"
	opRecreate = "POST /v1/sandboxes/{sandboxId}/actions/recreate"
	opCommand  = "POST /v1/sandboxes/{sandboxId}/commands"
	opRead     = "GET /v1/sandboxes/{sandboxId}/files/content"
	opWrite    = "PUT /v1/sandboxes/{sandboxId}/files/content"
	opEntries  = "GET /v1/sandboxes/{sandboxId}/files/entries"
	opEvents   = "GET /v1/events"
	opStream   = "GET /v1/events/stream"
)

// validationCase is one request against one operation. want is "" for a valid request, else words the
// one-line message must contain: where the rule is and which rule it is, so that a request refused
// for another reason than the rule under test fails.
type validationCase struct {
	name   string
	op     string // "METHOD /pattern"
	target string // path and query
	body   string
	want   []string
}

var validationCases = []validationCase{
	// Create: SandboxSpec.
	{"create minimal", opCreate, "/v1/sandboxes", `{"clientRequestId":"a"}`, nil},
	{"create full", opCreate, "/v1/sandboxes", benchCreateBody, nil},
	{"create template", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","template":"t"}`, nil},
	{"create extensions any value", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","extensions":{"acme.x":{"deep":[1,null]},"b2-c.Y_z.1":true}}`, nil},
	{"body required", opCreate, "/v1/sandboxes", ``, []string{"request body", "required"}},
	{"body not JSON", opCreate, "/v1/sandboxes", `{"clientRequestId":`, []string{"request body", "JSON"}},
	{"body null", opCreate, "/v1/sandboxes", `null`, []string{"request body: /:", "want object"}},
	{"body array", opCreate, "/v1/sandboxes", `[]`, []string{"request body: /:", "want object"}},
	{"unknown field", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","colour":"blue"}`, []string{"/:", `unknown field "colour"`}},
	{"unknown field other case", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","ClientRequestID":"b"}`, []string{`unknown field "ClientRequestID"`}},
	{"required clientRequestId", opCreate, "/v1/sandboxes", `{"image":"x"}`, []string{`missing required field "clientRequestId"`}},
	{"clientRequestId type", opCreate, "/v1/sandboxes", `{"clientRequestId":7}`, []string{"/clientRequestId:", "want string"}},
	{"clientRequestId minLength", opCreate, "/v1/sandboxes", `{"clientRequestId":""}`, []string{"/clientRequestId:", "minLength"}},
	{"clientRequestId pattern", opCreate, "/v1/sandboxes", `{"clientRequestId":" \t "}`, []string{"/clientRequestId:", `does not match pattern "\\S"`}},
	{"image pattern", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","image":"  "}`, []string{"/image:", "pattern"}},
	{"template minLength", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","template":""}`, []string{"/template:", "minLength"}},
	{"image null", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","image":null}`, []string{"/image:", "got null"}},
	{"not image and template", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","image":"x","template":"y"}`, []string{"/:", "image and template cannot both be set"}},
	{"resources unknown field", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","resources":{"gpus":1}}`, []string{"/resources:", `unknown field "gpus"`}},
	{"cpuMillis minimum", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","resources":{"cpuMillis":0}}`, []string{"/resources/cpuMillis:", "must be >= 1, got 0"}},
	{"memoryMiB minimum", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","resources":{"memoryMiB":-1}}`, []string{"/resources/memoryMiB:", "must be >= "}},
	{"diskMiB integer", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","resources":{"diskMiB":1.5}}`, []string{"/resources/diskMiB:", "want integer"}},
	{"diskMiB string", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","resources":{"diskMiB":"1"}}`, []string{"/resources/diskMiB:", "want integer"}},
	{"cpuMillis huge", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","resources":{"cpuMillis":1e400}}`, nil},
	{"capability enum", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","requiredCapabilities":["teleport"]}`, []string{"/requiredCapabilities/0:", "commandExecution"}},
	{"capabilities uniqueItems", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","requiredCapabilities":["fileAccess","fileAccess"]}`, []string{"/requiredCapabilities:", "uniqueItems", "equal"}},
	{"capabilities type", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","requiredCapabilities":"fileAccess"}`, []string{"/requiredCapabilities:", "want array"}},
	{"extension key no namespace", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","extensions":{"plain":1}}`, []string{"/extensions:", `key "plain"`, "pattern"}},
	{"extension key upper", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","extensions":{"Acme.x":1}}`, []string{`key "Acme.x"`, "pattern"}},
	{"extension key empty name", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","extensions":{"acme.":1}}`, []string{`key "acme."`}},
	{"extensions type", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","extensions":[1]}`, []string{"/extensions:", "want object"}},
	{"key with a slash and a newline", opCreate, "/v1/sandboxes", `{"clientRequestId":"a","resources":{"a/b\n":1}}`, []string{`unknown field "a/b\n"`}},

	// Path parameter.
	{"get", opGet, "/v1/sandboxes/sbx_1", ``, nil},
	{"sandboxId minLength", opGet, "/v1/sandboxes/", ``, []string{`path parameter "sandboxId"`, "required"}},

	// ExpectedGeneration body, through a $ref to components/requestBodies.
	{"pause", opPause, "/v1/sandboxes/s/actions/pause", `{"expectedGeneration":1}`, nil},
	{"pause empty object", opPause, "/v1/sandboxes/s/actions/pause", `{}`, []string{`missing required field "expectedGeneration"`}},
	{"pause minimum", opPause, "/v1/sandboxes/s/actions/pause", `{"expectedGeneration":0}`, []string{"/expectedGeneration:", "must be >= "}},
	{"pause string", opPause, "/v1/sandboxes/s/actions/pause", `{"expectedGeneration":"1"}`, []string{"/expectedGeneration:", "want integer"}},
	{"pause fraction", opPause, "/v1/sandboxes/s/actions/pause", `{"expectedGeneration":1.5}`, []string{"/expectedGeneration:", "want integer"}},
	{"pause unknown field", opPause, "/v1/sandboxes/s/actions/pause", `{"expectedGeneration":1,"force":true}`, []string{`unknown field "force"`}},

	// Recreate: an inline body with a nested SandboxSpec.
	{"recreate", opRecreate, "/v1/sandboxes/s/actions/recreate", `{"expectedGeneration":1,"spec":{"clientRequestId":"x"}}`, nil},
	{"recreate spec required", opRecreate, "/v1/sandboxes/s/actions/recreate", `{"expectedGeneration":1}`, []string{`missing required field "spec"`}},
	{"recreate nested not", opRecreate, "/v1/sandboxes/s/actions/recreate", `{"expectedGeneration":1,"spec":{"clientRequestId":"x","image":"a","template":"b"}}`, []string{"/spec:", "image and template cannot both be set"}},
	{"recreate nested extension key", opRecreate, "/v1/sandboxes/s/actions/recreate", `{"expectedGeneration":1,"spec":{"clientRequestId":"x","extensions":{"x":1}}}`, []string{"/spec/extensions:", `key "x"`}},

	// CommandRequest.
	{"command", opCommand, "/v1/sandboxes/s/commands", `{"expectedGeneration":1,"argv":["true"],"timeoutSeconds":3600,"maxOutputBytes":10485760}`, nil},
	{"command tiny timeout", opCommand, "/v1/sandboxes/s/commands", `{"expectedGeneration":1,"argv":["true"],"timeoutSeconds":1e-300}`, nil},
	{"timeout past math/big's exponent", opCommand, "/v1/sandboxes/s/commands", `{"expectedGeneration":1,"argv":["x"],"timeoutSeconds":1e9999999}`, []string{"/timeoutSeconds:", "out of the range"}},
	{"command integer as 1.0", opCommand, "/v1/sandboxes/s/commands", `{"expectedGeneration":1.0,"argv":["true"]}`, nil},
	{"argv required", opCommand, "/v1/sandboxes/s/commands", `{"expectedGeneration":1}`, []string{`missing required field "argv"`}},
	{"argv minItems", opCommand, "/v1/sandboxes/s/commands", `{"expectedGeneration":1,"argv":[]}`, []string{"/argv:", "minItems"}},
	{"argv item type", opCommand, "/v1/sandboxes/s/commands", `{"expectedGeneration":1,"argv":[1]}`, []string{"/argv/0:", "want string"}},
	{"env value type", opCommand, "/v1/sandboxes/s/commands", `{"expectedGeneration":1,"argv":["x"],"env":{"A":1}}`, []string{"/env/A:", "want string"}},
	{"timeout exclusiveMinimum", opCommand, "/v1/sandboxes/s/commands", `{"expectedGeneration":1,"argv":["x"],"timeoutSeconds":0}`, []string{"/timeoutSeconds:", "must be > 0, got 0"}},
	{"timeout maximum", opCommand, "/v1/sandboxes/s/commands", `{"expectedGeneration":1,"argv":["x"],"timeoutSeconds":3600.5}`, []string{"/timeoutSeconds:", "must be <= 3600, got 3600.5"}},
	{"maxOutputBytes maximum", opCommand, "/v1/sandboxes/s/commands", `{"expectedGeneration":1,"argv":["x"],"maxOutputBytes":10485761}`, []string{"/maxOutputBytes:", "must be <= 10485760, got 10485761"}},
	{"maxOutputBytes minimum", opCommand, "/v1/sandboxes/s/commands", `{"expectedGeneration":1,"argv":["x"],"maxOutputBytes":0}`, []string{"/maxOutputBytes:", "must be >= "}},
	{"command unknown field", opCommand, "/v1/sandboxes/s/commands", `{"expectedGeneration":1,"argv":["x"],"shell":true}`, []string{`unknown field "shell"`}},

	// FileWriteRequest.
	{"write", opWrite, "/v1/sandboxes/s/files/content", `{"expectedGeneration":1,"path":"a","contentBase64":""}`, nil},
	{"write contentBase64 required", opWrite, "/v1/sandboxes/s/files/content", `{"expectedGeneration":1,"path":"b"}`, []string{`missing required field "contentBase64"`}},
	{"write unknown field", opWrite, "/v1/sandboxes/s/files/content", `{"expectedGeneration":1,"path":"b","contentBase64":"","mode":"0600"}`, []string{`unknown field "mode"`}},

	// Query parameters.
	{"read", opRead, "/v1/sandboxes/s/files/content?path=a&expectedGeneration=1", ``, nil},
	{"read path required", opRead, "/v1/sandboxes/s/files/content?expectedGeneration=1", ``, []string{`query parameter "path"`, "required"}},
	{"read expectedGeneration required", opRead, "/v1/sandboxes/s/files/content?path=a", ``, []string{`query parameter "expectedGeneration"`, "required"}},
	{"read expectedGeneration minimum", opRead, "/v1/sandboxes/s/files/content?path=a&expectedGeneration=0", ``, []string{`query parameter "expectedGeneration"`, "must be >= "}},
	{"read expectedGeneration integer", opRead, "/v1/sandboxes/s/files/content?path=a&expectedGeneration=one", ``, []string{`query parameter "expectedGeneration"`, `"one" is not an integer`}},
	{"read expectedGeneration empty", opRead, "/v1/sandboxes/s/files/content?path=a&expectedGeneration=", ``, []string{`query parameter "expectedGeneration"`, "empty"}},
	{"read first non-empty value", opRead, "/v1/sandboxes/s/files/content?path=a&expectedGeneration=&expectedGeneration=0", ``, []string{`query parameter "expectedGeneration"`, "must be >= "}},
	{"read empty path is the handler's", opRead, "/v1/sandboxes/s/files/content?path=&expectedGeneration=1", ``, nil},
	{"entries path optional", opEntries, "/v1/sandboxes/s/files/entries?expectedGeneration=2", ``, nil},
	{"entries expectedGeneration required", opEntries, "/v1/sandboxes/s/files/entries?path=.", ``, []string{`query parameter "expectedGeneration"`, "required"}},
	{"events", opEvents, "/v1/events?after=0&sandboxId=x", ``, nil},
	{"events no query", opEvents, "/v1/events", ``, nil},
	{"after minimum", opEvents, "/v1/events?after=-1", ``, []string{`query parameter "after"`, "must be >= "}},
	{"after integer", opEvents, "/v1/events?after=1.5", ``, []string{`query parameter "after"`, "not an integer"}},
	{"after out of range", opEvents, "/v1/events?after=99999999999999999999", ``, []string{`query parameter "after"`, "not an integer"}},
	{"after empty", opEvents, "/v1/events?after=", ``, []string{`query parameter "after"`, "empty"}},
	{"stream after minimum", opStream, "/v1/events/stream?after=-5", ``, []string{`query parameter "after"`, "must be >= "}},
}

// newValidationRequest builds tc's request, with the path values the mux would set.
func newValidationRequest(t testing.TB, tc validationCase) (*http.Request, []byte) {
	t.Helper()
	method, pattern, _ := strings.Cut(tc.op, " ")
	body := []byte(tc.body)
	r, err := http.NewRequest(method, tc.target, bytes.NewReader(body))
	if err != nil {
		t.Fatalf("%s: %v", tc.name, err)
	}
	segs, got := strings.Split(pattern, "/"), strings.Split(r.URL.Path, "/")
	if len(segs) != len(got) {
		t.Fatalf("%s: %s does not fit %s", tc.name, r.URL.Path, pattern)
	}
	for i, s := range segs {
		if name, ok := strings.CutPrefix(s, "{"); ok {
			r.SetPathValue(strings.TrimSuffix(name, "}"), got[i])
		}
	}
	return r, body
}

// validation is one way of validating a request: the contract compiled by package schema or by the
// library (package plain), and the body parsed by jsondoc or by encoding/json.
type validation struct {
	name   string
	all    func() validators
	decode func([]byte) (any, []byte, error)
}

var (
	ownOnce   = sync.OnceValue(func() validators { return contractValidators(nil) })
	plainOnce = sync.OnceValue(func() validators { return contractValidators(plain.Compile) })
)

// validations are every way, the default first.
var validations = []validation{
	{"own+jsondoc", ownOnce, jsondoc.DecodeFirst},
	{"plain+jsondoc", plainOnce, jsondoc.DecodeFirst},
	{"own+encoding/json", ownOnce, stdDecodeFirst},
	{"plain+encoding/json", plainOnce, stdDecodeFirst},
}

// validate validates tc's request the way w does.
func (w validation) validate(t testing.TB, tc validationCase) error {
	t.Helper()
	method, pattern, _ := strings.Cut(tc.op, " ")
	r, body := newValidationRequest(t, tc)
	_, err := w.all().operation(method, pattern).validate(r, body, w.decode)
	return err
}

func TestValidatorRules(t *testing.T) {
	for _, w := range validations {
		t.Run(w.name, func(t *testing.T) { testValidatorRules(t, w) })
	}
}

func testValidatorRules(t *testing.T, w validation) {
	for _, tc := range validationCases {
		t.Run(tc.name, func(t *testing.T) {
			err := w.validate(t, tc)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, sandbox.ErrInvalidRequest) {
				t.Fatalf("got %v, want ErrInvalidRequest", err)
			}
			msg := err.Error()
			if strings.ContainsAny(msg, "\n\r") || strings.Contains(msg, "Schema:") {
				t.Errorf("message is not one line: %q", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not say %q", msg, w)
				}
			}
		})
	}
}

// kinContract is the embedded contract as kin-openapi loads and checks it: the reference
// implementation of the contract, used by tests only.
var kinContract = sync.OnceValues(func() (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	return doc, nil
})

// kinValidate is kin-openapi's per-request validation of the embedded contract: the reference the
// precompiled validators must agree with.
func kinValidate(t testing.TB, tc validationCase) (err error) {
	t.Helper()
	contract, err := kinContract()
	if err != nil {
		t.Fatal(err)
	}
	method, pattern, _ := strings.Cut(tc.op, " ")
	r, body := newValidationRequest(t, tc)
	item := contract.Paths.Value(pattern)
	op := &routers.Route{Spec: contract, Path: pattern, PathItem: item, Method: method, Operation: item.GetOperation(method)}
	params := map[string]string{}
	for _, p := range item.Parameters {
		if p.Value.In == "path" {
			params[p.Value.Name] = r.PathValue(p.Value.Name)
		}
	}
	if op.Operation.RequestBody != nil {
		r.Header.Set("Content-Type", "application/json")
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
	}
	// kin-openapi's JSON Schema validator dereferences a nil math/big value for a number past
	// math/big's exponent limit under a numeric keyword: that panic is its refusal of the number.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("kin-openapi panicked: %v: %w", p, sandbox.ErrInvalidRequest)
		}
	}()
	return openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
		Request: r, PathParams: params, Route: op,
		Options: &openapi3filter.Options{SkipSettingDefaults: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	})
}

// TestValidatorAgreesWithKinOpenAPI: every request the precompiled validators accept, kin-openapi's
// per-request validation accepts, and the same for refusals, whichever way they validate.
func TestValidatorAgreesWithKinOpenAPI(t *testing.T) {
	for _, tc := range validationCases {
		theirs := kinValidate(t, tc)
		for _, w := range validations {
			if ours := w.validate(t, tc); (ours == nil) != (theirs == nil) {
				t.Errorf("%s, %s: precompiled %v, kin-openapi %v", tc.name, w.name, ours, theirs)
			}
		}
	}
}

// TestValidationsAgree: every way of validating refuses a request with the same message.
func TestValidationsAgree(t *testing.T) {
	for _, tc := range validationCases {
		want := validations[0].validate(t, tc)
		for _, w := range validations[1:] {
			got := w.validate(t, tc)
			if (got == nil) != (want == nil) || got != nil && !sameRefusal(got, want) {
				t.Errorf("%s: %s %v, %s %v", tc.name, w.name, got, validations[0].name, want)
			}
		}
	}
}

// sameRefusal: two refusals say the same, but for the words of a JSON syntax error, which are each
// parser's own.
func sameRefusal(a, b error) bool {
	const syntax = "request body: not valid JSON: "
	if strings.HasPrefix(a.Error(), syntax) {
		return strings.HasPrefix(b.Error(), syntax)
	}
	return a.Error() == b.Error()
}

// TestEveryOperationCompiles: each operation of the contract has a validator, and only those, with
// either compiler.
func TestEveryOperationCompiles(t *testing.T) {
	for _, w := range validations[:2] {
		t.Run(w.name, func(t *testing.T) { testEveryOperationCompiles(t, w.all()) })
	}
}

func testEveryOperationCompiles(t *testing.T, all validators) {
	doc, err := kinContract()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			n++
			v := all[method+" "+path]
			if v == nil {
				t.Fatalf("%s %s: no validator", method, path)
			}
			if (v.body != nil) != (op.RequestBody != nil) {
				t.Errorf("%s %s: body schema %v, contract request body %v", method, path, v.body != nil, op.RequestBody != nil)
			}
			if want := len(item.Parameters) + len(op.Parameters); len(v.params) != want {
				t.Errorf("%s %s: %d parameters, contract %d", method, path, len(v.params), want)
			}
		}
	}
	if len(all) != n {
		t.Errorf("%d validators for %d operations", len(all), n)
	}
}

// FuzzValidatorAgreesWithKinOpenAPI: for any body or query of the operations that take one, the
// precompiled validators accept exactly what kin-openapi's per-request validation accepts, whichever way
// they validate, and every refusal is ErrInvalidRequest with a one-line message, the same each way.
func FuzzValidatorAgreesWithKinOpenAPI(f *testing.F) {
	ops := []validationCase{
		{op: opCreate, target: "/v1/sandboxes"},
		{op: opRecreate, target: "/v1/sandboxes/s/actions/recreate"},
		{op: opCommand, target: "/v1/sandboxes/s/commands"},
		{op: opWrite, target: "/v1/sandboxes/s/files/content"},
		{op: opPause, target: "/v1/sandboxes/s/actions/pause"},
		{op: opRead, target: "/v1/sandboxes/s/files/content?"},
		{op: opEvents, target: "/v1/events?"},
	}
	for _, tc := range validationCases {
		for i, op := range ops {
			if op.op == tc.op {
				if strings.HasSuffix(op.target, "?") {
					_, q, _ := strings.Cut(tc.target, "?")
					f.Add(uint8(i), q)
				} else {
					f.Add(uint8(i), tc.body)
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, input string) {
		tc := ops[int(which)%len(ops)]
		if strings.HasSuffix(tc.target, "?") {
			if _, err := http.NewRequest(http.MethodGet, tc.target+input, nil); err != nil || strings.Contains(input, "#") {
				return // not a query a client could send
			}
			tc.target += input
		} else {
			tc.body = input
		}
		theirs := kinValidate(t, tc)
		first := validations[0].validate(t, tc)
		for _, w := range validations {
			ours := w.validate(t, tc)
			if (ours == nil) != (theirs == nil) {
				t.Fatalf("%s %q, %s: precompiled %v, kin-openapi %v", tc.op, input, w.name, ours, theirs)
			}
			if ours != nil && (!errors.Is(ours, sandbox.ErrInvalidRequest) || strings.ContainsAny(ours.Error(), "\r\n")) {
				t.Fatalf("%s %q, %s: %q", tc.op, input, w.name, ours)
			}
			if ours != nil && !sameRefusal(ours, first) {
				t.Fatalf("%s %q: %s %q, %s %q", tc.op, input, w.name, ours, validations[0].name, first)
			}
		}
	})
}
