package agentclient

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
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
