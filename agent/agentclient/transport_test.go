package agentclient_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
)

// eachTransport runs f on each of the client's transports: its own, and net/http's (the plain path).
func eachTransport(t *testing.T, f func(t *testing.T, wire agentclient.Wire)) {
	for _, tr := range []struct {
		name string
		wire agentclient.Wire
	}{{"own", agentclient.Wire{}}, {"net/http", agentclient.Wire{PlainTransport: true}}} {
		t.Run(tr.name, func(t *testing.T) { f(t, tr.wire) })
	}
}

// counted serves h on a unix socket and returns a client of it on wire and the number of connections
// the client made so far.
func counted(t *testing.T, wire agentclient.Wire, srv *http.Server) (*agentclient.Client, *atomic.Int32) {
	t.Helper()
	sock := serveUnix(t, srv)
	var dials atomic.Int32
	var d net.Dialer
	c := agentclient.NewWire(func(ctx context.Context) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, "unix", sock)
	}, wire)
	t.Cleanup(func() { c.Close() })
	return c, &dials
}

// serveUnix serves srv on a new unix socket until the test ends, and returns the socket's path.
func serveUnix(t *testing.T, srv *http.Server) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tr")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close(); os.RemoveAll(dir) })
	return sock
}

func health(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(healthBody))
}

func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Calls share one kept-alive connection, and one the agent closed while idle is replaced, not used.
func TestTransportReusesAndReplacesConnections(t *testing.T) {
	eachTransport(t, func(t *testing.T, wire agentclient.Wire) {
		var mu sync.Mutex
		var idle []net.Conn
		srv := &http.Server{Handler: http.HandlerFunc(health), ConnState: func(c net.Conn, st http.ConnState) {
			if st == http.StateIdle {
				mu.Lock()
				idle = append(idle, c)
				mu.Unlock()
			}
		}}
		c, dials := counted(t, wire, srv)
		for i := 0; i < 5; i++ {
			if _, err := c.Health(bounded(t)); err != nil {
				t.Fatal(err)
			}
		}
		if n := dials.Load(); n != 1 {
			t.Fatalf("5 calls made %d connections, want 1", n)
		}
		mu.Lock()
		for _, conn := range idle {
			conn.Close() // the agent closes its idle connection
		}
		mu.Unlock()
		for i := 0; i < 3; i++ {
			if _, err := c.Health(bounded(t)); err != nil {
				t.Fatalf("after the agent closed its connection: %v", err)
			}
		}
		if n := dials.Load(); n != 2 {
			t.Fatalf("%d connections, want 2", n)
		}
	})
}

// An answer followed by bytes nobody asked for leaves its connection unused afterwards.
func TestTransportDropsAConnectionWithUnsolicitedBytes(t *testing.T) {
	eachTransport(t, func(t *testing.T, wire agentclient.Wire) {
		served := make(chan struct{}, 2)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() { served <- struct{}{} }()
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%sHTTP/1.1 200 OK\r\n", len(healthBody), healthBody)
			buf.Flush()
			time.Sleep(100 * time.Millisecond)
		})}
		c, dials := counted(t, wire, srv)
		for i := 0; i < 2; i++ {
			if _, err := c.Health(bounded(t)); err != nil {
				t.Fatal(err)
			}
			if wire.PlainTransport {
				// net/http's read loop finds the unsolicited bytes on its own goroutine, after it has
				// put the connection back: a call made at once can take the connection first and
				// read them as its answer. Once the peer has closed, it has found them.
				<-served
			}
		}
		if n := dials.Load(); n != 2 {
			t.Fatalf("%d connections, want 2: the first carried more than its answer", n)
		}
	})
}

// Ending the caller's context ends a call that is waiting for its answer (were it not, the call would
// wait out its hour-long deadline and the test would time out).
func TestTransportCancel(t *testing.T) {
	eachTransport(t, func(t *testing.T, wire agentclient.Wire) {
		release := make(chan struct{})
		defer close(release)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release })}
		c, _ := counted(t, wire, srv)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		time.AfterFunc(50*time.Millisecond, cancel)
		if _, err := c.Health(ctx); !errors.Is(err, sandbox.ErrProviderUnavailable) {
			t.Fatalf("cancelled call: %v", err)
		}
	})
}
