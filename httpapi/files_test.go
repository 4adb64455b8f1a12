package httpapi

import (
	"bytes"
	"encoding/base64"
	"net/http/httptest"
	"testing"
)

// writeFileContent writes byte for byte what writeJSON writes for the same FileContent.
func TestWriteFileContentIsWriteJSON(t *testing.T) {
	for _, path := range []string{"a.txt", "dir/é ü.bin", `q"uote\back`, "<script>&amp;", "\u2028line", "\x01ctl"} {
		for _, n := range []int{0, 1, 2, 3, 4, 1000, 1 << 16} {
			data := bytes.Repeat([]byte{0xff, 0x00, 'a', '+', '/'}, n/5+1)[:n]
			want := httptest.NewRecorder()
			writeJSON(want, 200, FileContent{Path: path, ContentBase64: base64.StdEncoding.EncodeToString(data), Size: int64(n)})
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
