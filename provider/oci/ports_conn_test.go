package oci_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestPortConnections: the proxy's kept-alive connections to a sandbox's port, on both paths (the
// daemon's own socket in the sandbox's namespace, and the agent's relay). A connection is reused from
// one request to the next; a server that resets its connection before its head is a 502 and one that
// resets it in its body cuts the client's answer (its head, or its body, ends in an error), neither
// poisoning the next request; a port
// nothing listens on is a 502 that says so; a pause with a connection idle refuses at once and the
// resume makes a new connection; the generation a recreate makes never gets a connection of the one
// before.
func TestPortConnections(t *testing.T) {
	testenv.NoLeaks(t)
	e := newPortEnv(t)
	e.onBothPaths(t, e.testConnections)
}

func (e *portEnv) testConnections(t *testing.T, _ bool) {
	sb := e.create(t)
	e.serve(t, sb, "http", 8000)
	e.serve(t, sb, "reset", 8001)
	e.serve(t, sb, "cut", 8002)
	base := e.c.PortURL(sb.ID, 8000)
	conn := func(t *testing.T) (nonce, port string) {
		t.Helper()
		st, _, body := e.get(t, e.hc, "GET", base+"conn", nil, nil)
		nonce, port, ok := strings.Cut(body, " ")
		if st != 200 || !ok {
			t.Fatalf("GET /conn: %d %q", st, body)
		}
		return nonce, port
	}

	pid, first := conn(t)
	if _, again := conn(t); again != first {
		t.Errorf("a second request came on another connection (client port %s, then %s)", first, again)
	}

	t.Run("reset before the head", func(t *testing.T) {
		st, _, body := e.get(t, e.hc, "GET", e.c.PortURL(sb.ID, 8001)+"x", nil, nil)
		if st != 502 || errCode(body) != "port_unreachable" {
			t.Errorf("%d %s", st, body)
		}
	})
	t.Run("reset in the body", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(ctxFor(t), "GET", e.c.PortURL(sb.ID, 8002)+"x", nil)
		req.Header.Set("Authorization", "Bearer "+portToken)
		resp, err := e.hc.Do(req)
		if err != nil {
			return // the head had not left the daemon yet: the client's connection is cut
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || err == nil || !strings.HasPrefix("0123456789", string(b)) {
			t.Errorf("%d, %q, %v: want 200 and at most the 10 bytes, then an error", resp.StatusCode, b, err)
		}
	})
	t.Run("nothing listening", func(t *testing.T) {
		st, _, body := e.get(t, e.hc, "GET", e.c.PortURL(sb.ID, 8099)+"x", nil, nil)
		if st != 502 || errCode(body) != "port_unreachable" || !strings.Contains(body, "port 8099") || !strings.Contains(body, "refused") {
			t.Errorf("%d %s", st, body)
		}
	})
	if _, again := conn(t); again != first {
		t.Errorf("the hostile ports' errors dropped port 8000's connection (client port %s, then %s)", first, again)
	}

	t.Run("pause with a connection idle", func(t *testing.T) {
		ctx := ctxFor(t)
		if _, err := e.c.Pause(ctx, sb.ID, sb.Generation); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if st, _, body := e.get(t, e.hc, "GET", base+"conn", nil, nil); st != 409 || errCode(body) != "invalid_state" {
			t.Errorf("paused: %d %s", st, body)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("paused: answered after %v", d)
		}
		if _, err := e.c.Resume(ctx, sb.ID, sb.Generation); err != nil {
			t.Fatal(err)
		}
		p, port := conn(t)
		if p != pid || port == first {
			t.Errorf("after the resume: server %s (was %s), client port %s (was %s): want the same server on a new connection", p, pid, port, first)
		}
	})

	t.Run("recreate", func(t *testing.T) {
		ctx := ctxFor(t)
		_, before := conn(t)
		if _, err := e.c.Terminate(ctx, sb.ID, sb.Generation); err != nil {
			t.Fatal(err)
		}
		for cur := sb; cur.State != sandbox.StateTerminated; time.Sleep(20 * time.Millisecond) {
			var err error
			if cur, err = e.c.Get(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
		}
		next, err := e.c.Recreate(ctx, sb.ID, sb.Generation, sandbox.Spec{ClientRequestID: string(sandbox.NewID())})
		if err != nil {
			t.Fatal(err)
		}
		next = e.waitReady(t, next)
		if next.Generation == sb.Generation {
			t.Fatalf("the recreate kept generation %d", next.Generation)
		}
		// Before the new generation's server listens, nothing of the old one answers.
		if st, _, body := e.get(t, e.hc, "GET", base+"conn", nil, nil); st != 502 || errCode(body) != "port_unreachable" {
			t.Errorf("the new generation, nothing listening yet: %d %s", st, body)
		}
		e.serve(t, next, "http", 8000)
		p, port := conn(t)
		if p == pid {
			t.Errorf("the new generation was answered by the old one's server (%s)", p)
		}
		t.Logf("client port %s before the recreate, %s after", before, port)
		if _, err := e.c.Terminate(ctx, next.ID, next.Generation); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatal(err)
		}
	})
}
