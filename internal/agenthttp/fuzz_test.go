package agenthttp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox"
)

// FuzzReadHead reads fuzzed bytes as the head of an answer, to a fuzzed bound: a head is refused as a
// protocol error, or ends early, or is accepted within every bound, and then net/http reads the same
// status and Content-Length from it (the client's parser takes less than net/http's, never more, or
// other).
func FuzzReadHead(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nDate: x\r\n\r\n{}",
		"HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\nConnection: keep-alive, close\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200\nContent-Length:\t7 \n\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
		"HTTP/1.1 200 OK\r\n" + strings.Repeat("X-A: b\r\n", 70) + "Content-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 17<<10) + "\r\nContent-Length: 0\r\n\r\n",
		"", "HTTP/1.1 200 OK\r\n",
	} {
		f.Add([]byte(seed), uint32(1<<10))
	}
	f.Fuzz(func(t *testing.T, b []byte, max uint32) {
		r := bytes.NewReader(b)
		br := bufio.NewReaderSize(r, maxHeadBytes)
		a, err := readHead(br, int64(max))
		if err != nil {
			if !errors.Is(err, sandbox.ErrProviderProtocol) && err != io.EOF && err != io.ErrUnexpectedEOF {
				t.Fatalf("%q: unclassified error %v", b, err)
			}
			return
		}
		bound := int64(max)
		if a.Status/100 != 2 {
			bound = MaxErrorBytes
		}
		if used := len(b) - r.Len() - br.Buffered(); used > maxHeadBytes {
			t.Fatalf("%q: head of %d bytes accepted", b, used)
		}
		if a.Status < 200 || a.Status > 599 || a.Length < 0 || a.Length > bound || a.left != a.Length {
			t.Fatalf("%q: accepted status %d, length %d (bound %d)", b, a.Status, a.Length, bound)
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
		if err != nil {
			t.Fatalf("%q: accepted, but net/http refuses it: %v", b, err)
		}
		if resp.StatusCode != a.Status || (a.Status != 204 && a.Status != 304 && resp.ContentLength != a.Length) {
			t.Fatalf("%q: status %d, length %d; net/http reads %d, %d", b, a.Status, a.Length, resp.StatusCode, resp.ContentLength)
		}
	})
}
