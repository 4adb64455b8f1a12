package httpapi

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/testenv/corestack"
)

// portStub is the stub provider with portForwarding, whose every port is addr on the host.
type portStub struct {
	*stubProvider
	addr string
}

func (p portStub) Manifest(context.Context) (sandbox.Manifest, error) {
	return sandbox.Manifest{Name: "stub", Version: "1", RuntimeClass: "none", Capabilities: sandbox.Capabilities{PortForwarding: true}}, nil
}

func (p portStub) DialPort(ctx context.Context, _ sandbox.Ref, _ int) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, errors.Join(err, sandbox.ErrPortUnreachable)
	}
	return c, nil
}

// TestTCPRelayNeverHangs: a client that stops answering pings is dropped, and the connection to the
// port with it; a port that closes ends the socket with 1000 after its last bytes; nothing is left
// running.
func TestTCPRelayNeverHangs(t *testing.T) {
	oldPing, oldWrite := tcpPingInterval.Load(), tcpWriteTimeout.Load()
	tcpPingInterval.Store(int64(100 * time.Millisecond))
	tcpWriteTimeout.Store(int64(300 * time.Millisecond))
	t.Cleanup(func() { tcpPingInterval.Store(oldPing); tcpWriteTimeout.Store(oldWrite) })
	// Registered after the restore, so it runs first: the relays have ended before the bounds change.
	testenv.NoLeaks(t)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	rt := corestack.New(t, portStub{&stubProvider{refs: map[sandbox.Ref]bool{}}, ln.Addr().String()}).Runtime
	_, srv := serve(t, Config{Runtime: rt})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := rt.Create(ctx, sandbox.Spec{ClientRequestID: "ports"})
	if err != nil {
		t.Fatal(err)
	}
	for sb.State != sandbox.StateReady {
		time.Sleep(10 * time.Millisecond)
		if sb, err = rt.Get(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/sandboxes/" + string(sb.ID) + "/ports/" + strconv.Itoa(8080) + "/tcp"
	dial := func() (*websocket.Conn, net.Conn) {
		t.Helper()
		ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{tcpSubprotocol}})
		if err != nil {
			t.Fatal(err)
		}
		return ws, <-accepted
	}

	// A client that never reads answers no ping: dropped, and the port's connection closed.
	ws, port := dial()
	_ = port.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(port); err != nil {
		t.Errorf("the port's connection did not end when the client went silent: %v", err)
	}
	port.Close()
	ws.CloseNow()

	// The port writes and closes: the client reads it all, then a normal closure.
	ws, port = dial()
	port.Write([]byte("last words"))
	port.Close()
	_, got, err := ws.Read(ctx)
	if err != nil || string(got) != "last words" {
		t.Fatalf("read %q, %v", got, err)
	}
	if _, _, err := ws.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("after the port closed: %v", err)
	}
	ws.CloseNow()
}

// TestPortProxyConnections: the proxy keeps its connection to a port between requests; a terminate
// closes it, with no request to notice it; the recreated generation gets a connection of its own.
func TestPortProxyConnections(t *testing.T) {
	testenv.NoLeaks(t)
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.RemoteAddr)
	}))
	upstream.Config.ConnState = func(c net.Conn, st http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch st {
		case http.StateNew:
			open[c] = true
		case http.StateClosed, http.StateHijacked:
			delete(open, c)
		}
	}
	upstream.Start()
	defer upstream.Close()
	openConns := func() int { mu.Lock(); defer mu.Unlock(); return len(open) }
	waitOpen := func(n int) {
		t.Helper()
		for i := 0; openConns() != n; i++ {
			if i > 500 {
				t.Fatalf("%d connections open, want %d", openConns(), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	rt := corestack.New(t, portStub{&stubProvider{refs: map[sandbox.Ref]bool{}}, upstream.Listener.Addr().String()}).Runtime
	_, srv := serve(t, Config{Runtime: rt})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ready := func(sb *sandbox.Sandbox, err error) *sandbox.Sandbox {
		t.Helper()
		for err == nil && sb.State != sandbox.StateReady {
			time.Sleep(10 * time.Millisecond)
			sb, err = rt.Get(ctx, sb.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	sb := ready(rt.Create(ctx, sandbox.Spec{ClientRequestID: "ports"}))
	var err error
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	defer hc.CloseIdleConnections()
	get := func() string {
		t.Helper()
		resp, err := hc.Get(srv.URL + "/v1/sandboxes/" + string(sb.ID) + "/ports/8080/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		return string(b)
	}

	first := get()
	if again := get(); again != first {
		t.Errorf("the second request came from %s, the first from %s: the connection was not kept", again, first)
	}
	waitOpen(1)
	// A terminate closes the connection, with no request to notice it.
	if _, err := rt.Terminate(ctx, sb.ID, sb.Generation); err != nil {
		t.Fatal(err)
	}
	waitOpen(0)
	for sb.State != sandbox.StateTerminated {
		time.Sleep(10 * time.Millisecond)
		if sb, err = rt.Get(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	next := ready(rt.Recreate(ctx, sb.ID, sb.Generation, sandbox.Spec{ClientRequestID: "ports again"}))
	sb = next
	if after := get(); after == first {
		t.Errorf("generation %d was served on an earlier generation's connection %s", next.Generation, first)
	}
	waitOpen(1)
}
