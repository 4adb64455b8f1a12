package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
	"github.com/sandboxd/sandbox/internal/schema"
)

// TestExtensionsDocument: api/extensions.yaml is a valid OpenAPI 3.1 document; its ErrorResponse is the
// contract's; each of its SpecExtensions keys is in sandboxd's namespace and names, in x-capability, the
// capability package sandbox says it needs, and package sandbox knows no key the document does not.
func TestExtensionsDocument(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(api.Extensions)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	contract, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	ours, _ := json.Marshal(doc.Components.Schemas["ErrorResponse"].Value)
	theirs, _ := json.Marshal(contract.Components.Schemas["ErrorResponse"].Value)
	if !bytes.Equal(ours, theirs) {
		t.Errorf("ErrorResponse differs from the contract's:\n%s\n%s", ours, theirs)
	}
	var keys []string
	for key, ref := range doc.Components.Schemas["SpecExtensions"].Value.Properties {
		keys = append(keys, key)
		capName, _ := ref.Value.Extensions["x-capability"].(string)
		got, ok := sandbox.ExtensionCapability(key)
		if !ok || string(got) != capName {
			t.Errorf("%s: x-capability %q, package sandbox %q (known %v)", key, capName, got, ok)
		}
		if capName != "" && !knownCapability(capName) {
			t.Errorf("%s: x-capability %q is no capability of the contract", key, capName)
		}
	}
	slices.Sort(keys)
	known := sandbox.ExtensionKeys()
	slices.Sort(known)
	if !slices.Equal(keys, known) {
		t.Errorf("document keys %v, package sandbox's %v", keys, known)
	}
}

func knownCapability(name string) bool {
	all := sandbox.Capabilities{}
	v := reflect.ValueOf(&all).Elem()
	for i := 0; i < v.NumField(); i++ {
		v.Field(i).SetBool(true)
	}
	return all.Has(sandbox.Capability(name))
}

// TestEveryExtensionOperationIsServed: each operation of api/extensions.yaml has a validator and a
// route, and every extension route is in the document.
func TestEveryExtensionOperationIsServed(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(api.Extensions)
	if err != nil {
		t.Fatal(err)
	}
	ext := extensionsDoc(nil)
	s := &Server{}
	served := map[string]bool{}
	for _, rt := range s.extensionRoutes() {
		served[rt.method+" "+docPath(rt.path)] = true
	}
	n := 0
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			n++
			key := method + " " + path
			if ext.ops[key] == nil {
				t.Errorf("%s: no validator", key)
			}
			if !served[key] {
				t.Errorf("%s: no route", key)
			}
		}
	}
	if len(served) != n || len(ext.ops) != n {
		t.Errorf("%d routes and %d validators for %d operations", len(served), len(ext.ops), n)
	}
}

// TestUnknownOwnExtensionRefused: a create or recreate naming a sandboxd.* key that sandboxd does not
// know is a 400, before anything is recorded; another namespace's key is stored untouched.
func TestUnknownOwnExtensionRefused(t *testing.T) {
	srv, _ := serve(t, Config{})
	for _, tc := range []struct{ path, body string }{
		{"/v1/sandboxes", `{"clientRequestId":"x","extensions":{"sandboxd.nope":{}}}`},
		{"/v1/sandboxes/sbx_a/actions/recreate", `{"expectedGeneration":1,"spec":{"clientRequestId":"x","extensions":{"sandboxd.nope":1}}}`},
	} {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, fromLoopback(httptest.NewRequest(http.MethodPost, tc.path, strings.NewReader(tc.body))))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "sandboxd.nope") {
			t.Errorf("%s: %d %s", tc.path, rec.Code, rec.Body)
		}
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, fromLoopback(httptest.NewRequest(http.MethodPost, "/v1/sandboxes",
		strings.NewReader(`{"clientRequestId":"y","extensions":{"acme.sandboxd":{"a":1}}}`))))
	if rec.Code != http.StatusCreated {
		t.Errorf("another namespace's key: %d %s", rec.Code, rec.Body)
	}
}

// TestCheckExtensionsValidates: a known key's value is validated against its schema in the document.
func TestCheckExtensionsValidates(t *testing.T) {
	d, err := schema.Parse([]byte(`components: { schemas: { K: { type: object, required: [a], properties: { a: { type: integer } } } } }`))
	if err != nil {
		t.Fatal(err)
	}
	v, err := schema.Own(d, "#/components/schemas/K")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{ext: &extensionDoc{keys: map[string]schema.Validator{"sandboxd.k": v}}, decodeFirst: stdDecodeFirst}
	good := sandbox.Spec{Extensions: map[string]json.RawMessage{"sandboxd.k": json.RawMessage(`{"a":1}`)}}
	if err := s.checkExtensions(good); err != nil {
		t.Errorf("good value: %v", err)
	}
	bad := sandbox.Spec{Extensions: map[string]json.RawMessage{"sandboxd.k": json.RawMessage(`{"a":"x"}`)}}
	if err := s.checkExtensions(bad); err == nil || !strings.Contains(err.Error(), `"sandboxd.k"/a`) {
		t.Errorf("bad value: %v", err)
	}
}

// TestCheckRawMediaType: an operation that streams a body of bytes takes only its documented media
// types, one Content-Type header, and a missing one only for an empty body.
func TestCheckRawMediaType(t *testing.T) {
	raw := []string{"application/octet-stream", "application/x-tar"}
	for _, tc := range []struct {
		ct   []string
		n    int64
		okay bool
	}{
		{[]string{"application/octet-stream"}, 10, true},
		{[]string{"application/x-tar; charset=binary"}, 10, true},
		{nil, 0, true},
		{nil, 10, false},
		{[]string{"application/json"}, 10, false},
		{[]string{"text/plain"}, 10, false},
		{[]string{"application/octet-stream", "application/octet-stream"}, 10, false},
	} {
		r := httptest.NewRequest(http.MethodPut, "/x", strings.NewReader(""))
		r.ContentLength = tc.n
		if tc.ct != nil {
			r.Header["Content-Type"] = tc.ct
		}
		err := checkRawMediaType(r, raw)
		if (err == nil) != tc.okay || (err != nil && !errors.Is(err, sandbox.ErrInvalidRequest)) {
			t.Errorf("%q, %d bytes: %v", tc.ct, tc.n, err)
		}
	}
}

// TestLifetimeExtensionValidated: sandboxd.lifetime is validated against its schema in
// api/extensions.yaml before anything is recorded, and what holds is in providerExtensions.
func TestLifetimeExtensionValidated(t *testing.T) {
	srv, _ := serve(t, Config{})
	n := 0
	post := func(ext string) *httptest.ResponseRecorder {
		n++
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, fromLoopback(httptest.NewRequest(http.MethodPost, "/v1/sandboxes",
			strings.NewReader(fmt.Sprintf(`{"clientRequestId":"l%d","extensions":{"sandboxd.lifetime":%s}}`, n, ext)))))
		return rec
	}
	for _, bad := range []string{`{}`, `{"ttlSeconds":0}`, `{"ttlSeconds":"1"}`, `{"onIdle":"nap","idleSeconds":1}`, `{"ttl":5}`, `[]`} {
		if rec := post(bad); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "sandboxd.lifetime") {
			t.Errorf("%s: %d %s", bad, rec.Code, rec.Body)
		}
	}
	rec := post(`{"ttlSeconds":600,"idleSeconds":60}`)
	if rec.Code != http.StatusCreated || !strings.Contains(rec.Body.String(), `"providerExtensions":{"sandboxd.lifetime":{"since":`) ||
		!strings.Contains(rec.Body.String(), `"ttlSeconds":600,"expiresAt":`) {
		t.Fatalf("valid lifetime: %d %s", rec.Code, rec.Body)
	}
	// What is recorded is LifetimeRecorded of the document.
	var sb struct {
		ProviderExtensions map[string]any `json:"providerExtensions"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &sb); err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(api.Extensions)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Components.Schemas["LifetimeRecorded"].Value.VisitJSON(sb.ProviderExtensions["sandboxd.lifetime"], openapi3.EnableJSONSchema2020()); err != nil {
		t.Errorf("recorded lifetime %v: %v", sb.ProviderExtensions["sandboxd.lifetime"], err)
	}
}
