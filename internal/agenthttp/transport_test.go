package agenthttp_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/agenthttp"
)

// TestRoundTripWrites sends requests over a stream that is not a socket (net.Pipe, which hands over
// each write as it is, as a relayed pods/exec stream makes each write a frame) and reads them as they
// arrive: a request with a small body comes in one write, head and body; one past 16 KiB comes as its
// head, then its body; each is answered and read whole.
func TestRoundTripWrites(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   []byte
		writes int
	}{
		{"none", nil, 1},
		{"keystroke", []byte("a"), 1},
		{"16KiB", bytes.Repeat([]byte("x"), 16<<10), 1},
		{"past16KiB", bytes.Repeat([]byte("x"), 16<<10+1), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer server.Close()
			tr := agenthttp.New(func(context.Context) (net.Conn, error) { return client, nil })
			defer tr.CloseIdle()
			got := make(chan [][]byte, 1)
			go func() {
				var writes [][]byte
				var all []byte
				buf := make([]byte, 64<<10)
				for {
					n, err := server.Read(buf)
					if err != nil {
						got <- writes
						return
					}
					writes = append(writes, bytes.Clone(buf[:n]))
					all = append(all, buf[:n]...)
					if _, body, ok := bytes.Cut(all, []byte("\r\n\r\n")); ok && len(body) == len(tc.body) {
						break
					}
				}
				got <- writes
				server.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			method := http.MethodPost
			if tc.body == nil {
				method = http.MethodGet
			}
			a, err := tr.RoundTrip(ctx, method, "/v1/process/stdin?pid=7", "", time.Now().Add(time.Minute), tc.body, 16)
			if err != nil {
				t.Fatal(err)
			}
			var answer bytes.Buffer
			_, err = answer.ReadFrom(a)
			a.Release(err)
			if err != nil || a.Status != http.StatusOK || answer.String() != "ok" {
				t.Fatalf("answer %d %q, %v", a.Status, answer.String(), err)
			}
			writes := <-got
			if len(writes) != tc.writes {
				sizes := make([]int, len(writes))
				for i, w := range writes {
					sizes[i] = len(w)
				}
				t.Fatalf("writes of %v bytes, want %d writes", sizes, tc.writes)
			}
			req := bytes.Join(writes, nil)
			if !bytes.HasPrefix(req, []byte(method+" /v1/process/stdin?pid=7 HTTP/1.1\r\n")) || !bytes.HasSuffix(req, append([]byte("\r\n\r\n"), tc.body...)) {
				t.Fatalf("request %.200q", req)
			}
			if tc.writes == 2 && !bytes.Equal(writes[1], tc.body) {
				t.Fatalf("second write of %d bytes, not the body's %d", len(writes[1]), len(tc.body))
			}
		})
	}
}
