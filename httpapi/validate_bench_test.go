package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

const benchCreateBody = `{"clientRequestId":"bench-1","image":"docker.io/library/alpine:3","resources":{"cpuMillis":500,"memoryMiB":256},"requiredCapabilities":["commandExecution","fileAccess"],"extensions":{"acme.tier":"gold"}}`

// BenchmarkValidateCreate is the contract check of one create body, without the handler, each way.
func BenchmarkValidateCreate(b *testing.B) {
	r := httptest.NewRequest(http.MethodPost, "/v1/sandboxes", nil)
	benchValidate(b, "POST /v1/sandboxes", r, []byte(benchCreateBody))
}

// BenchmarkValidateCommand is the contract check of one command body and its path parameter.
func BenchmarkValidateCommand(b *testing.B) {
	r := httptest.NewRequest(http.MethodPost, "/v1/sandboxes/sbx_1/commands", nil)
	r.SetPathValue("sandboxId", "sbx_1")
	benchValidate(b, "POST /v1/sandboxes/{sandboxId}/commands", r,
		[]byte(`{"expectedGeneration":1,"argv":["sh","-c","true"],"env":{"A":"B"},"timeoutSeconds":30,"maxOutputBytes":65536}`))
}

// BenchmarkValidateWrite1MiB is the contract check of a write of 1 MiB.
func BenchmarkValidateWrite1MiB(b *testing.B) {
	r := httptest.NewRequest(http.MethodPut, "/v1/sandboxes/sbx_1/files/content", nil)
	r.SetPathValue("sandboxId", "sbx_1")
	body, _ := json.Marshal(api.FileWriteRequest{ExpectedGeneration: 1, Path: "f.bin", ContentBase64: base64.StdEncoding.EncodeToString(make([]byte, 1<<20))})
	benchValidate(b, "PUT /v1/sandboxes/{sandboxId}/files/content", r, body)
}

func benchValidate(b *testing.B, op string, r *http.Request, body []byte) {
	method, pattern, _ := strings.Cut(op, " ")
	for _, w := range validations {
		v := w.all().operation(method, pattern)
		b.Run(w.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := v.validate(r, body, w.decode); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchSandbox is a server with one sandbox, and the path of that sandbox.
func benchSandbox(b *testing.B) (*Server, string) {
	rt := newRuntime(b)
	s := New(Config{Runtime: rt, Logger: slog.New(slog.DiscardHandler), AllowedHosts: []string{"example.com"}})
	sb, err := rt.Create(context.Background(), sandbox.Spec{ClientRequestID: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	return s, "/v1/sandboxes/" + string(sb.ID)
}

// BenchmarkGetSandbox is GET /v1/sandboxes/{id} through the whole Server: routing, validation, the
// runtime and the JSON response.
func BenchmarkGetSandbox(b *testing.B) {
	s, path := benchSandbox(b)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// BenchmarkGetSandboxParallel is BenchmarkGetSandbox from GOMAXPROCS goroutines at once.
func BenchmarkGetSandboxParallel(b *testing.B) {
	s, path := benchSandbox(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w := httptest.NewRecorder()
			s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
			if w.Code != http.StatusOK {
				b.Errorf("status %d: %s", w.Code, w.Body)
				return
			}
		}
	})
}

// BenchmarkCreateInvalid is a create refused by the contract: the 400 path, message included.
func BenchmarkCreateInvalid(b *testing.B) {
	s := New(Config{Runtime: newRuntime(b), Logger: slog.New(slog.DiscardHandler), AllowedHosts: []string{"example.com"}})
	body := `{"clientRequestId":"a","image":"x","template":"y"}`
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/sandboxes", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		s.ServeHTTP(w, r)
		if w.Code != http.StatusBadRequest {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}
