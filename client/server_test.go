package client_test

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/httpapi"
	"github.com/sandboxd/sandbox/internal/testenv/stack"
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
	logger := slog.New(slog.DiscardHandler)
	prov, err := host.New(host.Config{Dir: filepath.Join(dir, "sandboxes"), Logger: logger})
	if err != nil {
		return "", nil, err
	}
	s, err := stack.Start(dir, prov,
		stack.StoreConfig(func(c *sqlite.Config) { c.Retention = retention }),
		stack.Core(func(c *core.Config) { c.Logger = logger }),
		// The tests' proxies pass the Host they were reached at, on a port of their own.
		stack.API(func(c *httpapi.Config) { c.Logger, c.AllowedHosts = logger, []string{"127.0.0.1"} }))
	if err != nil {
		return "", nil, err
	}
	return s.URL, s.Close, nil
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
