package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

// writeFileContent writes byte for byte what writeJSON writes for the same FileContent.
func TestWriteFileContentIsWriteJSON(t *testing.T) {
	for _, path := range []string{"a.txt", "dir/é ü.bin", `q"uote\back`, "<script>&amp;", "\u2028line", "\x01ctl"} {
		for _, n := range []int{0, 1, 2, 3, 4, 1000, 1 << 16} {
			data := bytes.Repeat([]byte{0xff, 0x00, 'a', '+', '/'}, n/5+1)[:n]
			want := httptest.NewRecorder()
			writeJSON(want, 200, api.FileContent{Path: path, ContentBase64: base64.StdEncoding.EncodeToString(data), Size: int64(n)})
			got := httptest.NewRecorder()
			writeFileContent(got, path, data)
			if !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) {
				t.Fatalf("path %q, %d bytes:\n got %.200q\nwant %.200q", path, n, got.Body.Bytes(), want.Body.Bytes())
			}
			for _, h := range []string{"Content-Type", "Cache-Control", "X-Content-Type-Options"} {
				if got.Header().Get(h) != want.Header().Get(h) {
					t.Fatalf("header %s: %q, want %q", h, got.Header().Get(h), want.Header().Get(h))
				}
			}
			if got.Code != want.Code {
				t.Fatalf("status %d, want %d", got.Code, want.Code)
			}
		}
	}
}

// TestDataAfterTheDocumentIsRefused: a write body with something after its JSON document is a 400,
// whether it is small (decoded by the handler) or over bigBody (decoded once, by validation).
func TestDataAfterTheDocumentIsRefused(t *testing.T) {
	s, _ := hostServer(t)
	sb, err := s.rt.Create(context.Background(), sandbox.Spec{ClientRequestID: "trailing"})
	if err != nil {
		t.Fatal(err)
	}
	path := "/v1/sandboxes/" + string(sb.ID) + "/files/content"
	for _, size := range []int{3, 3 * bigBody} {
		doc := `{"expectedGeneration":1,"path":"f","contentBase64":"` + base64.StdEncoding.EncodeToString(make([]byte, size)) + `"}`
		for body, want := range map[string]int{doc: http.StatusOK, doc + "\n ": http.StatusOK, doc + "0": http.StatusBadRequest, doc + "{}": http.StatusBadRequest} {
			w := httptest.NewRecorder()
			s.ServeHTTP(w, fromLoopback(httptest.NewRequest("PUT", path, strings.NewReader(body))))
			if w.Code != want {
				t.Errorf("%d bytes, then %q: %d %s, want %d", size, body[len(doc):], w.Code, w.Body.Bytes(), want)
			}
		}
	}
}
