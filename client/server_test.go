package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/httpapi"
	"github.com/sandboxd/sandbox/provider/host"
	"github.com/sandboxd/sandbox/store/sqlite"
)

// exampleURL is the daemon the examples talk to, started by TestMain.
var exampleURL string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sandboxd-client")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	url, stop, err := startDaemon(dir, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the example daemon:", err)
		os.Exit(1)
	}
	exampleURL = url
	code := m.Run()
	stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// startDaemon runs the real stack (SQLite store under dir, host provider, runtime core, HTTP API) on a
// free loopback port and returns its URL and a function that stops it.
func startDaemon(dir string, retention int) (string, func(), error) {
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "sandboxd.db"), Retention: retention})
	if err != nil {
		return "", nil, err
	}
	prov, err := host.New(host.Config{Dir: filepath.Join(dir, "sandboxes"), Logger: logger})
	if err != nil {
		st.Close()
		return "", nil, err
	}
	rt, err := core.New(core.Config{Store: st, Provider: prov, Logger: logger})
	if err != nil {
		st.Close()
		return "", nil, err
	}
	if err := rt.Start(ctx); err != nil {
		st.Close()
		return "", nil, err
	}
	// The tests' proxies pass the Host they were reached at, on a port of their own.
	api := httpapi.New(httpapi.Config{Runtime: rt, Logger: logger, AllowedHosts: []string{"127.0.0.1"}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		rt.Close()
		st.Close()
		return "", nil, err
	}
	srv := &http.Server{Handler: api}
	go srv.Serve(ln)
	stop := func() {
		api.Close()
		srv.Close()
		rt.Close()
		st.Close()
	}
	return "http://" + ln.Addr().String(), stop, nil
}

// newDaemon starts a daemon for one test and stops it when the test ends.
func newDaemon(t *testing.T, retention int) string {
	t.Helper()
	url, stop, err := startDaemon(t.TempDir(), retention)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url
}

// cutProxy forwards TCP connections to a server and can cut every open one, as a dropped network would.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(s, c); s.Close() }()
		go func() { defer p.wg.Done(); io.Copy(c, s); c.Close() }()
	}
}

// cut closes every connection open now, and reports how many client connections it cut.
func (p *cutProxy) cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	n := len(p.conns) / 2
	p.conns = nil
	return n
}
