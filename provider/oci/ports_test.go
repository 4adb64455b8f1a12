package oci_test

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/httpapi"
	"github.com/sandboxd/sandbox/httpapi/apitest"
	"github.com/sandboxd/sandbox/internal/testenv"
	teststack "github.com/sandboxd/sandbox/internal/testenv/stack"
	"github.com/sandboxd/sandbox/provider/oci"
)

//go:embed testdata/portserver.py
var portServer []byte

const portToken = "ports-test-token"

// portEnv is an API stack over an oci provider with authentication on and a preview listener, and
// clients of it.
type portEnv struct {
	p       *oci.Provider
	st      *teststack.Stack
	c       *client.Client // answers checked against the documents
	hc      *http.Client   // plain, for what the sandbox's servers answer
	preview string         // the preview listener's base URL
	domain  string
	skew    atomic.Int64 // added to the preview clock, in nanoseconds
}

func newPortEnv(t testing.TB) *portEnv { return newPortEnvAuth(t, true) }

// newPortEnvAuth is newPortEnv with authentication on or off.
func newPortEnvAuth(t testing.TB, auth bool) *portEnv {
	t.Helper()
	p := newProvider(t)
	if onGVisor(t, p) {
		t.Skip("portForwarding is tested on runc")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &portEnv{domain: "preview.test", p: p}
	tokens, err := httpapi.NewTokens(portToken)
	if err != nil {
		t.Fatal(err)
	}
	pc := &httpapi.PreviewConfig{Secret: bytes.Repeat([]byte{7}, 32), Addr: ln.Addr().String(), Domain: e.domain,
		Now: func() time.Time { return time.Now().Add(time.Duration(e.skew.Load())) }}
	e.st = teststack.New(t, p, teststack.API(func(c *httpapi.Config) {
		if auth {
			c.Tokens = tokens
		}
		c.Preview = pc
		c.PortResponseTimeout = 2 * time.Second
	}))
	srv := &http.Server{Handler: e.st.API.PreviewHandler(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	e.preview = "http://" + ln.Addr().String()
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	t.Cleanup(tr.CloseIdleConnections)
	e.hc = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var checked http.RoundTripper = tr
	if tt, ok := t.(*testing.T); ok {
		checked = apitest.Transport(tt, tr) // a benchmark's answers are not checked
	}
	e.c, err = client.New(e.st.URL, client.WithToken(portToken), client.WithHTTPClient(&http.Client{Transport: checked}))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *portEnv) create(t testing.TB) *sandbox.Sandbox {
	t.Helper()
	ctx := ctxFor(t)
	sb, err := e.c.Create(ctx, sandbox.Spec{ClientRequestID: string(sandbox.NewID())})
	if err != nil {
		t.Fatal(err)
	}
	return e.waitReady(t, sb)
}

func (e *portEnv) waitReady(t testing.TB, sb *sandbox.Sandbox) *sandbox.Sandbox {
	t.Helper()
	ctx := ctxFor(t)
	var err error
	for sb.State != sandbox.StateReady {
		if sb.State == sandbox.StateFailed {
			t.Fatalf("sandbox failed: %+v", sb.Failure)
		}
		time.Sleep(20 * time.Millisecond)
		if sb, err = e.c.Get(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	return sb
}

// serve starts portserver.py in mode on port inside sb and waits until it listens.
func (e *portEnv) serve(t testing.TB, sb *sandbox.Sandbox, mode string, port int) {
	t.Helper()
	ctx := ctxFor(t)
	if _, err := e.c.WriteFile(ctx, sb.ID, sb.Generation, "/workspace/portserver.py", portServer); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.StartProcess(ctx, sb.ID, sb.Generation, sandbox.ProcessSpec{
		Argv: []string{"python3", "/workspace/portserver.py", mode, strconv.Itoa(port)}}); err != nil {
		t.Fatal(err)
	}
	wait := fmt.Sprintf("import socket,time\nfor i in range(200):\n try:\n  socket.create_connection(('127.0.0.1',%d)).close(); break\n except OSError: time.sleep(0.05)\nelse: raise SystemExit(1)", port)
	res, err := e.c.Exec(ctx, sb.ID, sb.Generation, sandbox.Command{Argv: []string{"python3", "-c", wait}})
	if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("%s server on %d did not listen: %v %+v", mode, port, err, res)
	}
}

// get sends one request with the API's token and returns the status and body.
func (e *portEnv) get(t *testing.T, hc *http.Client, method, u string, body io.Reader, h http.Header) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxFor(t), method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if req.Header.Get("Authorization") == "" && h.Get("X-No-Auth") == "" {
		req.Header.Set("Authorization", "Bearer "+portToken)
	}
	req.Header.Del("X-No-Auth")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func errCode(body string) string {
	var er struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal([]byte(body), &er)
	return er.Error.Code
}

// TestPorts: the proxy, the TCP relay and preview URLs on real sandboxes, servers started inside
// them; the sandbox has no network link (egress deny), so nothing goes through a link.
//
// Each runs twice: on the sockets the daemon makes in the sandbox's network namespace, and through the
// agent's relay (what a gVisor sandbox's ports go through).
func TestPorts(t *testing.T) {
	testenv.NoLeaks(t)
	e := newPortEnv(t)
	e.onBothPaths(t, e.testPorts)
}

// onBothPaths runs f on the daemon's own sockets in the sandbox's network namespace, then through the
// agent's relay.
func (e *portEnv) onBothPaths(t *testing.T, f func(t *testing.T, relay bool)) {
	for _, path := range []string{"socket", "relay"} {
		t.Run(path, func(t *testing.T) {
			oci.RelayPorts(e.p, path == "relay")
			defer oci.RelayPorts(e.p, false)
			f(t, path == "relay")
		})
	}
}

func (e *portEnv) testPorts(t *testing.T, relay bool) {
	sb := e.create(t)
	e.serve(t, sb, "http", 8000)
	checked := &http.Client{Transport: apitest.Transport(t, e.hc.Transport), CheckRedirect: e.hc.CheckRedirect}
	base := e.c.PortURL(sb.ID, 8000)

	t.Run("http with egress deny", func(t *testing.T) {
		if st, _, body := e.get(t, e.hc, "GET", base+"hello?x=1&y=%2F", nil, nil); st != 200 || body != "hello from /hello?x=1&y=%2F" {
			t.Fatalf("GET: %d %q", st, body)
		}
		if st, _, body := e.get(t, e.hc, "GET", base, nil, nil); st != 200 || body != "hello from /" {
			t.Fatalf("GET /: %d %q", st, body)
		}
		if st, _, body := e.get(t, e.hc, "POST", base+"echo", strings.NewReader("a body"), http.Header{"Content-Type": {"text/plain"}}); st != 200 || body != "a body" {
			t.Fatalf("POST: %d %q", st, body)
		}
		st, _, body := e.get(t, e.hc, "GET", base+"headers", nil, http.Header{"Cookie": {"a=b"}})
		var h map[string]string
		if err := json.Unmarshal([]byte(body), &h); err != nil || st != 200 {
			t.Fatalf("headers: %d %q", st, body)
		}
		if h["Authorization"] != "" || h["Host"] != "127.0.0.1:8000" || h["X-Forwarded-For"] == "" || h["Cookie"] != "a=b" {
			t.Errorf("the server saw %v", h)
		}
	})

	t.Run("ports are canonical", func(t *testing.T) {
		for _, p := range []string{"02280", "+80", "0", "65536", "80%20", "-1", "0x50", "99999"} {
			u := e.st.URL + "/v1/sandboxes/" + string(sb.ID) + "/ports/" + p + "/"
			if st, _, body := e.get(t, checked, "GET", u, nil, nil); st != 400 || errCode(body) != "invalid_request" {
				t.Errorf("port %q: %d %s", p, st, body)
			}
		}
	})

	t.Run("unauthenticated", func(t *testing.T) {
		if st, _, body := e.get(t, checked, "GET", base+"hello", nil, http.Header{"X-No-Auth": {"1"}}); st != 401 || errCode(body) != "unauthenticated" {
			t.Errorf("no token: %d %s", st, body)
		}
		if st, _, _ := e.get(t, checked, "GET", base+"hello", nil, http.Header{"Authorization": {"Bearer wrong"}}); st != 401 {
			t.Errorf("wrong token: %d", st)
		}
		u, _ := url.Parse(base)
		ws, _, err := websocket.Dial(ctxFor(t), "ws://"+u.Host+u.Path+"ws", nil)
		if err == nil {
			ws.CloseNow()
			t.Error("a WebSocket without a token was let through")
		}
	})

	t.Run("websocket echo", func(t *testing.T) {
		u, _ := url.Parse(base)
		ctx := ctxFor(t)
		ws, _, err := websocket.Dial(ctx, "ws://"+u.Host+u.Path+"ws", &websocket.DialOptions{
			HTTPHeader: http.Header{"Authorization": {"Bearer " + portToken}}})
		if err != nil {
			t.Fatal(err)
		}
		defer ws.CloseNow()
		ws.SetReadLimit(1 << 20)
		for _, msg := range [][]byte{[]byte("ping"), bytes.Repeat([]byte("z"), 200<<10)} {
			if err := ws.Write(ctx, websocket.MessageBinary, msg); err != nil {
				t.Fatal(err)
			}
			_, got, err := ws.Read(ctx)
			if err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("echo of %d bytes: %d bytes, %v", len(msg), len(got), err)
			}
		}
		if err := ws.Close(websocket.StatusNormalClosure, ""); err != nil {
			t.Errorf("close: %v", err)
		}
	})

	t.Run("port-forward round trip", func(t *testing.T) {
		conn, err := e.c.DialPort(ctxFor(t), sb.ID, 8000)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		for i := 0; i < 2; i++ { // two requests on the one connection
			fmt.Fprintf(conn, "GET /rt%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
		}
		br := bufio.NewReader(conn)
		for i := 0; i < 2; i++ {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if want := fmt.Sprintf("hello from /rt%d", i); string(b) != want {
				t.Errorf("answer %d: %q", i, b)
			}
		}
		if _, err := e.c.DialPort(ctxFor(t), sb.ID, 8099); !isCode(err, sandbox.ErrPortUnreachable) {
			t.Errorf("a closed port: %v", err)
		}
	})

	t.Run("1 GiB download with bounded memory", func(t *testing.T) {
		const size = 1 << 30
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		var peak atomic.Uint64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			var m runtime.MemStats
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				runtime.ReadMemStats(&m)
				if m.HeapInuse > peak.Load() {
					peak.Store(m.HeapInuse)
				}
			}
		}()
		start := time.Now()
		req, _ := http.NewRequestWithContext(ctxFor(t), "GET", base+"big?n="+strconv.Itoa(size), nil)
		req.Header.Set("Authorization", "Bearer "+portToken)
		resp, err := e.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		close(stop)
		wg.Wait()
		if err != nil || n != size {
			t.Fatalf("got %d bytes: %v", n, err)
		}
		grew := int64(peak.Load()) - int64(before.HeapInuse)
		t.Logf("1 GiB in %v (%.0f MB/s); heap in use grew by at most %d KiB", time.Since(start).Round(time.Millisecond),
			float64(size)/time.Since(start).Seconds()/1e6, grew>>10)
		if grew > 64<<20 {
			t.Errorf("the heap grew by %d MiB while 1 GiB went through", grew>>20)
		}
	})

	t.Run("hostile and closed ports", func(t *testing.T) {
		e.serve(t, sb, "garbage", 8001)
		e.serve(t, sb, "endless", 8002)
		e.serve(t, sb, "slow", 8003)
		for _, port := range []int{8001, 8002, 8003, 8099} {
			start := time.Now()
			st, _, body := e.get(t, checked, "GET", e.c.PortURL(sb.ID, port)+"x", nil, nil)
			if st != 502 || errCode(body) != "port_unreachable" {
				t.Errorf("port %d: %d %s", port, st, body)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("port %d answered after %v", port, d)
			}
		}
		// The tcp relay to a closed port is refused before the upgrade.
		u, _ := url.Parse(e.c.PortURL(sb.ID, 8099))
		_, resp, err := websocket.Dial(ctxFor(t), "ws://"+u.Host+u.Path+"tcp", &websocket.DialOptions{
			HTTPHeader: http.Header{"Authorization": {"Bearer " + portToken}}, Subprotocols: []string{"sandboxd.tcp"}})
		if err == nil || resp == nil || resp.StatusCode != 502 {
			t.Errorf("relay to a closed port: %v %v", resp, err)
		}
		// The proxy still serves.
		if st, _, _ := e.get(t, e.hc, "GET", base+"after", nil, nil); st != 200 {
			t.Errorf("after the hostile servers: %d", st)
		}
	})

	if !relay {
		t.Run("preview", func(t *testing.T) {
			e.testPreview(t, sb, checked)
		})
	}
}

func isCode(err error, class error) bool {
	return err != nil && sandbox.ClassOf(err).Err == class
}

func (e *portEnv) testPreview(t *testing.T, sb *sandbox.Sandbox, checked *http.Client) {
	ctx := ctxFor(t)
	tok, err := e.c.PreviewToken(ctx, sb.ID, 8000, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Port != 8000 || tok.Generation != sb.Generation || time.Until(tok.ExpiresAt) > 11*time.Minute {
		t.Errorf("token %+v", tok)
	}
	noAuth := http.Header{"X-No-Auth": {"1"}}
	pathURL := e.preview + "/p/" + string(sb.ID) + "/8000/"
	withToken := func(h string) http.Header { return http.Header{"X-No-Auth": {"1"}, "X-Sandboxd-Preview-Token": {h}} }

	// The URL carries the token once; a browser keeps it as a cookie of the host.
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Transport: e.hc.Transport, Jar: jar}
	hostURL := strings.Replace(tok.URL, "http://", "http://", 1)
	u, _ := url.Parse(hostURL)
	if !strings.HasPrefix(u.Host, "8000-"+string(sb.ID)+"."+e.domain) {
		t.Fatalf("preview URL %s", tok.URL)
	}
	// The test's resolver knows no preview.test: dial the listener, name the host.
	dialer := &net.Dialer{}
	listener := strings.TrimPrefix(e.preview, "http://")
	browser.Transport = &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, network, listener)
	}}
	resp, err := browser.Get(strings.Replace(tok.URL, "/?", "/hello?", 1))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "hello from /hello" || resp.Request.URL.RawQuery != "" {
		t.Fatalf("the host form in a browser: %d %q at %s", resp.StatusCode, b, resp.Request.URL)
	}
	// The path form, with the token in a header; the server never sees the token.
	if st, _, body := e.get(t, e.hc, "GET", pathURL+"headers", nil, withToken(tok.Token)); st != 200 || strings.Contains(body, tok.Token) {
		t.Errorf("path form: %d %s", st, body)
	}
	refused := func(what, u string, h http.Header, want int) {
		t.Helper()
		if st, _, body := e.get(t, e.hc, "GET", u, nil, h); st != want {
			t.Errorf("%s: %d %s", what, st, body)
		}
	}
	refused("no token", pathURL, noAuth, 401)
	refused("a forged token", pathURL, withToken(tok.Token[:len(tok.Token)-2]+"AA"), 401)
	refused("the token of port 8000 on 8001", e.preview+"/p/"+string(sb.ID)+"/8001/", withToken(tok.Token), 401)
	refused("02280", e.preview+"/p/"+string(sb.ID)+"/02280/", withToken(tok.Token), 400)
	refused("08000", e.preview+"/p/"+string(sb.ID)+"/08000/", withToken(tok.Token), 400)
	other := e.create(t)
	otherTok, err := e.c.PreviewToken(ctx, other.ID, 8000, 0)
	if err != nil {
		t.Fatal(err)
	}
	refused("another sandbox's token", pathURL, withToken(otherTok.Token), 401)
	e.skew.Store(int64(11 * time.Minute))
	refused("expired", pathURL, withToken(tok.Token), 401)
	e.skew.Store(0)
	refused("not expired", pathURL, withToken(tok.Token), 200)

	// Minting is the API's: authenticated, ports canonical, ttl bounded.
	mint := e.c.PortURL(sb.ID, 8000) + "preview-tokens"
	for _, c := range []struct {
		u, body string
		h       http.Header
		want    int
	}{
		{mint, `{}`, noAuth, 401},
		{strings.Replace(mint, "/8000/", "/02280/", 1), `{}`, nil, 400},
		{mint, `{"ttlSeconds": 0}`, nil, 400},
		{mint, `{"ttlSeconds": 604801}`, nil, 400},
		{mint, `{"ttl": 5}`, nil, 400},
		{strings.Replace(mint, string(sb.ID), "sbx_nope", 1), `{}`, nil, 404},
	} {
		h := http.Header{"Content-Type": {"application/json"}}
		for k, v := range c.h {
			h[k] = v
		}
		if st, _, body := e.get(t, checked, "POST", c.u, strings.NewReader(c.body), h); st != c.want {
			t.Errorf("POST %s %s: %d %s", c.u, c.body, st, body)
		}
	}

	// A recreate revokes the tokens of the generation before.
	if _, err := e.c.Terminate(ctx, other.ID, other.Generation); err != nil {
		t.Fatal(err)
	}
	for {
		got, err := e.c.Get(ctx, other.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == sandbox.StateTerminated {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	re, err := e.c.Recreate(ctx, other.ID, other.Generation, sandbox.Spec{ClientRequestID: string(sandbox.NewID())})
	if err != nil {
		t.Fatal(err)
	}
	re = e.waitReady(t, re)
	e.serve(t, re, "http", 8000)
	otherPath := e.preview + "/p/" + string(other.ID) + "/8000/"
	refused("a token of the generation before", otherPath, withToken(otherTok.Token), 401)
	fresh, err := e.c.PreviewToken(ctx, other.ID, 8000, 0)
	if err != nil {
		t.Fatal(err)
	}
	refused("a token of this generation", otherPath, withToken(fresh.Token), 200)
}
