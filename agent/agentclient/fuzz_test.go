package agentclient

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// answerClasses are the error classes a client call may return, whatever the agent answers.
var answerClasses = []error{
	sandbox.ErrProviderProtocol, sandbox.ErrProviderUnavailable, sandbox.ErrNotFound,
	sandbox.ErrInvalidRequest, sandbox.ErrRequestTooLarge,
}

func classified(err error) bool {
	for _, c := range answerClasses {
		if errors.Is(err, c) {
			return true
		}
	}
	return false
}

// FuzzClientAnswers serves whatever status and body the fuzzer makes to the client's calls: every
// answer is either accepted and valid (an exec result that passes validation, a list of valid entries) or
// refused with an error of a known class. Nothing panics and nothing unclassified leaks to the runtime.
func FuzzClientAnswers(f *testing.F) {
	ok := `{"exitCode":0,"stdout":"aGk=","stderr":"","timedOut":false,"cancelled":false,"truncated":false,` +
		`"startedAt":"2024-01-01T00:00:00Z","finishedAt":"2024-01-01T00:00:01Z"}`
	for _, seed := range []struct {
		status int
		body   string
	}{
		{200, ok},
		{200, `{"exitCode":null,"timedOut":true,"startedAt":"2024-01-01T00:00:00Z","finishedAt":"2024-01-01T00:00:00Z"}`},
		{200, `{"exitCode":256,"startedAt":"2024-01-01T00:00:00Z","finishedAt":"2024-01-01T00:00:01Z"}`},
		{200, `{"exitCode":0,"stdout":"!!!"}`},
		{200, `[{"path":"a","kind":"file","size":1}]`},
		{200, `[{"path":"a","kind":"socket"}]`},
		{200, `{"ok":true,"version":"1","pid":1}`},
		{200, ok + ` trailing`},
		{404, `{"code":"not_found","message":"no such file"}`},
		{504, `{"code":"deadline_exceeded","message":"late"}`},
		{500, `{"code":"weird"}`},
		{418, `not json`},
		{204, ``},
	} {
		f.Add(seed.status, []byte(seed.body))
	}
	var mu sync.Mutex
	var status int
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		st, b := status, body
		mu.Unlock()
		w.WriteHeader(st)
		w.Write(b)
	}))
	f.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	var d net.Dialer
	c := New(func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) })
	f.Cleanup(c.Close)

	f.Fuzz(func(t *testing.T, st int, b []byte) {
		if st < 200 || st > 599 {
			st = 200 + (st%400+400)%400
		}
		mu.Lock()
		status, body = st, b
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()

		req := protocol.ExecRequest{Argv: []string{"x"}, TimeoutMs: 1000, MaxOutputBytes: 16}
		if res, err := c.Exec(ctx, req); err != nil {
			if !classified(err) {
				t.Fatalf("exec: unclassified error %v for %d %q", err, st, b)
			}
		} else if verr := res.Result().Validate(req.Command()); verr != nil {
			t.Fatalf("exec accepted an invalid result %+v: %v", res, verr)
		}
		if entries, err := c.List(ctx, "."); err != nil {
			if !classified(err) {
				t.Fatalf("list: unclassified error %v for %d %q", err, st, b)
			}
		} else {
			for _, e := range entries {
				if e.Path == "" || e.Size < 0 || (e.Kind != sandbox.KindFile && e.Kind != sandbox.KindDirectory) {
					t.Fatalf("list accepted an invalid entry %+v", e)
				}
			}
		}
		if _, err := c.Health(ctx); err != nil && !classified(err) {
			t.Fatalf("health: unclassified error %v for %d %q", err, st, b)
		}
		if data, err := c.ReadFile(ctx, "f"); err != nil {
			if !classified(err) {
				t.Fatalf("read: unclassified error %v for %d %q", err, st, b)
			}
		} else if len(data) > sandbox.MaxFileBytes {
			t.Fatalf("read accepted %d bytes", len(data))
		}
	})
}

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
		if a.status/100 != 2 {
			bound = maxErrorBytes
		}
		if used := len(b) - r.Len() - br.Buffered(); used > maxHeadBytes {
			t.Fatalf("%q: head of %d bytes accepted", b, used)
		}
		if a.status < 200 || a.status > 599 || a.length < 0 || a.length > bound || a.left != a.length {
			t.Fatalf("%q: accepted status %d, length %d (bound %d)", b, a.status, a.length, bound)
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
		if err != nil {
			t.Fatalf("%q: accepted, but net/http refuses it: %v", b, err)
		}
		if resp.StatusCode != a.status || (a.status != 204 && a.status != 304 && resp.ContentLength != a.length) {
			t.Fatalf("%q: status %d, length %d; net/http reads %d, %d", b, a.status, a.length, resp.StatusCode, resp.ContentLength)
		}
	})
}
