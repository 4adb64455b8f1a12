package httpapi

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/internal/testenv/corestack"
	"github.com/sandboxd/sandbox/provider/host"
)

// hostServer is the real stack over the host provider, for the fuzz targets that need real files.
func hostServer(f testing.TB) (*Server, string) {
	dir := f.TempDir()
	prov, err := host.New(host.Config{Dir: filepath.Join(dir, "host")})
	if err != nil {
		f.Fatal(err)
	}
	rt := corestack.New(f, prov, corestack.Unstarted(), corestack.Core(func(c *core.Config) { c.ReconcileInterval = -1 })).Runtime
	return New(Config{Runtime: rt, Logger: slog.New(slog.DiscardHandler)}), filepath.Join(dir, "host")
}

// FuzzFileWriteBody writes fuzzed bodies (paths, base64, generations) into a real host sandbox. Every
// answer is a 2xx or an ErrorResponse below 500, and nothing is ever written outside the sandbox: the
// provider's directory holds the sandbox's directory and nothing else.
func FuzzFileWriteBody(f *testing.F) {
	for _, seed := range []string{
		`{"expectedGeneration":1,"path":"a.txt","contentBase64":"aGk="}`,
		`{"expectedGeneration":1,"path":"../../escape","contentBase64":"aGk="}`,
		`{"expectedGeneration":1,"path":"/abs/deep/x","contentBase64":""}`,
		`{"expectedGeneration":1,"path":"a/../../b","contentBase64":"aGk"}`,
		`{"expectedGeneration":1,"path":"x","contentBase64":"aG\nk="}`,
		`{"expectedGeneration":2,"path":"x","contentBase64":""}`,
		`{"expectedGeneration":1,"path":"","contentBase64":""}`,
		`{"expectedGeneration":1,"path":"\u0000","contentBase64":""}`,
		`{"expectedGeneration":1,"path":"x","contentBase64":"","extra":1}`,
		`{"expectedGeneration":1,"path":".","contentBase64":""}`,
	} {
		f.Add([]byte(seed))
	}
	s, hostDir := hostServer(f)
	sb, err := s.rt.Create(context.Background(), sandbox.Spec{ClientRequestID: "fuzz-files"})
	if err != nil {
		f.Fatal(err)
	}
	path := "/v1/sandboxes/" + string(sb.ID) + "/files/content"
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, fromLoopback(httptest.NewRequest("PUT", path, bytes.NewReader(body))))
		fuzzCheck(t, string(body), w.Code, w.Body.Bytes())
		entries, err := os.ReadDir(hostDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name() != sb.Ref().Name() {
				t.Fatalf("write %q left %q outside the sandbox", body, e.Name())
			}
		}
	})
}

// FuzzSandboxIDPath puts fuzzed sandbox ids in every path that takes one: the answer is a 404 (or a 400
// for a malformed parameter) ErrorResponse, never a 5xx, and never a 2xx for an id that was not made.
func FuzzSandboxIDPath(f *testing.F) {
	for _, seed := range []string{"sbx_aaaaaaaaaaaaaaaaaaaa", "", "..", "%2e%2e", "a/b", "\x00", "sbx_" + string(bytes.Repeat([]byte("z"), 5000)), "é", " "} {
		f.Add(seed)
	}
	s := New(Config{Runtime: newRuntime(f), Logger: slog.New(slog.DiscardHandler)})
	routes := []struct{ method, rest string }{
		{"GET", ""},
		{"POST", "/actions/reconcile"},
		{"POST", "/actions/pause"},
		{"POST", "/actions/terminate"},
		{"POST", "/commands"},
		{"GET", "/files/content?path=a&expectedGeneration=1"},
		{"GET", "/files/entries?path=.&expectedGeneration=1"},
	}
	f.Fuzz(func(t *testing.T, id string) {
		for _, rt := range routes {
			var body []byte
			if rt.method == "POST" && rt.rest != "/actions/reconcile" {
				body = []byte(`{"expectedGeneration":1,"argv":["true"]}`)
				if rt.rest != "/commands" {
					body = []byte(`{"expectedGeneration":1}`)
				}
			}
			req, err := http.NewRequest(rt.method, "/v1/sandboxes/"+url.PathEscape(id)+rt.rest, bytes.NewReader(body))
			if err != nil {
				continue // not a URL a client could send
			}
			w := httptest.NewRecorder()
			s.ServeHTTP(w, fromLoopback(req))
			fuzzCheck(t, rt.method+" "+id+rt.rest, w.Code, w.Body.Bytes())
			if w.Code/100 == 2 {
				t.Fatalf("%s %q%s: %d for a sandbox never made", rt.method, id, rt.rest, w.Code)
			}
		}
	})
}
