package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
	"github.com/sandboxd/sandbox/core"
)

// originServer is the real server on 127.0.0.1:0 over a real runtime; it returns the server, the port and
// the runtime.
func originServer(t *testing.T, cfg Config) (*httptest.Server, string, *core.Runtime) {
	t.Helper()
	rt := newRuntime(t)
	cfg.Runtime = rt
	_, srv := serve(t, cfg)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return srv, port, rt
}

// request sends method url with body (as JSON unless h says otherwise), the given Host (the URL's when
// empty) and the headers of h (a nil value removes one), and returns the status and body.
func request(t *testing.T, method, url, host, body string, h http.Header) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range h {
		if v == nil {
			req.Header.Del(k)
		} else {
			req.Header[k] = v
		}
	}
	resp, err := shortClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %d, reading the body: %v", method, url, resp.StatusCode, err)
	}
	return resp.StatusCode, raw
}

// shortClient gives up on an answer that does not end, as an event stream served by mistake.
var shortClient = &http.Client{Timeout: 10 * time.Second}

// invalidRequest reports whether a response is a 400 invalid_request ErrorResponse whose message says
// what.
func invalidRequest(status int, body []byte, what string) bool {
	var er api.ErrorResponse
	return status == 400 && json.Unmarshal(body, &er) == nil && er.Error.Code == sandbox.CodeInvalidRequest &&
		strings.Contains(er.Error.Message, what)
}

// nothingRecorded fails unless the runtime holds no sandbox and no event.
func nothingRecorded(t *testing.T, rt *core.Runtime) {
	t.Helper()
	list, err := rt.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	events, err := rt.Events(context.Background(), sandbox.EventQuery{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 || len(events) != 0 {
		t.Fatalf("refused requests recorded %d sandboxes and %d events", len(list), len(events))
	}
}

// TestRebindingHostIsRefused: a page whose own name was pointed at 127.0.0.1 (DNS rebinding) sends that
// name in Host; it is refused before routing, and nothing runs. The daemon's own address, the loopback
// names on its port and the allowed hosts are served.
func TestRebindingHostIsRefused(t *testing.T) {
	srv, port, rt := originServer(t, Config{AllowedHosts: []string{"sandboxd.internal", "api.example:8443"}})
	for _, host := range []string{
		"rebind.attacker.example:" + port, // the rebinding page's own name
		"rebind.attacker.example",
		"localhost:1" + port, // loopback, another port
		"127.0.0.1",          // port 80
		"127.0.0.2:" + port,  // loopback, but not this listener's address nor a loopback name
		"[::2]:" + port,
		"api.example:8444",
		"sandboxd.internal.attacker.example:" + port,
		"localhost.:" + port,
		"::1:" + port, // unbracketed
		"",            // none: HTTP/1.0
	} {
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/v1/sandboxes", ""},
			{"POST", "/v1/sandboxes", `{"clientRequestId":"rebound"}`},
			{"GET", "/no/such/route", ""},
			{"GET", "/healthz", ""},
		} {
			var st int
			var body []byte
			if host == "" {
				st, body = rawRequest(t, srv.Listener.Addr().String(), c.method+" "+c.path+" HTTP/1.0\r\n\r\n")
			} else {
				st, body = request(t, c.method, srv.URL+c.path, host, c.body, nil)
			}
			if !invalidRequest(st, body, "") {
				t.Errorf("Host %q, %s %s: %d %.200s, want 400 invalid_request", host, c.method, c.path, st, body)
			}
		}
	}
	nothingRecorded(t, rt)
	for _, host := range []string{
		"127.0.0.1:" + port, "localhost:" + port, "LocalHost:" + port, "[::1]:" + port, "[0:0::1]:" + port,
		"sandboxd.internal", "sandboxd.internal:" + port, "SANDBOXD.internal:9", "api.example:8443",
	} {
		if st, body := request(t, "GET", srv.URL+"/v1/sandboxes", host, "", nil); st != 200 {
			t.Errorf("Host %q: %d %s, want 200", host, st, body)
		}
	}
}

// rawRequest writes req on a new connection to addr and reads the answer.
func rawRequest(t *testing.T, addr, req string) (int, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(c)
	head, body, _ := strings.Cut(string(raw), "\r\n\r\n")
	var st int
	if _, err := fmt.Sscanf(head, "HTTP/1.%d %d", new(int), &st); err != nil {
		t.Fatalf("not an answer: %q", raw)
	}
	return st, []byte(body)
}

// TestCrossSiteOriginIsRefused: a page of another origin that sends a request to the daemon's own address
// (which the browser marks with Origin, or with Sec-Fetch-Site when it sends no Origin) is refused, and
// nothing runs; a request from the daemon's own origin is served.
func TestCrossSiteOriginIsRefused(t *testing.T) {
	srv, port, rt := originServer(t, Config{})
	create := `{"clientRequestId":"cross"}`
	for _, h := range []http.Header{
		{"Origin": {"http://attacker.example"}},
		{"Origin": {"https://attacker.example:" + port}},
		{"Origin": {"null"}}, // a sandboxed frame or a file: page
		{"Origin": {"http://localhost:1" + port}},
		{"Origin": {"http://127.0.0.1"}},
		{"Origin": {"ftp://127.0.0.1:" + port}},
		{"Origin": {"http://127.0.0.1:" + port + "/path"}},
		{"Origin": {""}},
		{"Origin": {"http://127.0.0.1:" + port, "http://attacker.example"}},
		{"Sec-Fetch-Site": {"cross-site"}},
		{"Sec-Fetch-Site": {"same-site"}},
	} {
		for _, c := range []struct{ method, path, body string }{
			{"POST", "/v1/sandboxes", create},
			{"GET", "/v1/sandboxes", ""},
			{"GET", "/v1/events/stream", ""},
		} {
			st, body := request(t, c.method, srv.URL+c.path, "", c.body, h)
			if !invalidRequest(st, body, "") {
				t.Errorf("%v, %s %s: %d %.200s, want 400 invalid_request", h, c.method, c.path, st, body)
			}
		}
	}
	nothingRecorded(t, rt)
	for i, h := range []http.Header{
		{"Origin": {"http://127.0.0.1:" + port}},
		{"Origin": {"http://localhost:" + port}},
		{"Origin": {"http://[::1]:" + port}},
		{"Origin": {"http://127.0.0.1:" + port}, "Sec-Fetch-Site": {"same-origin"}},
		{"Sec-Fetch-Site": {"none"}}, // typed in the address bar
	} {
		body := fmt.Sprintf(`{"clientRequestId":"same-%d"}`, i)
		if st, raw := request(t, "POST", srv.URL+"/v1/sandboxes", "", body, h); st != 201 {
			t.Errorf("%v: %d %s, want 201", h, st, raw)
		}
	}
}

// TestBodyMustBeJSON: a POST or PUT whose body is not declared application/json (the blind cross-site
// form POST is text/plain) is refused before its body is read, and nothing runs. A parameter such as
// charset is fine, and an operation without a body needs no Content-Type.
func TestBodyMustBeJSON(t *testing.T) {
	srv, _, rt := originServer(t, Config{})
	create := `{"clientRequestId":"form"}`
	for _, ct := range [][]string{
		nil, // none at all: was taken as JSON
		{""},
		{"text/plain"},
		{"text/plain;charset=UTF-8"},
		{"application/x-www-form-urlencoded"},
		{"multipart/form-data; boundary=x"},
		{"application/jsonx"},
		{"application/json-seq"},
		{"text/json"},
		{";"},
		{"application/json", "text/plain"},
	} {
		header := http.Header{"Content-Type": ct}
		for _, c := range []struct{ method, path string }{
			{"POST", "/v1/sandboxes"},
			{"POST", "/v1/sandboxes/sbx_none/actions/terminate"},
			{"POST", "/v1/sandboxes/sbx_none/actions/reconcile"},
			{"PUT", "/v1/sandboxes/sbx_none/files/content"},
		} {
			st, body := request(t, c.method, srv.URL+c.path, "", create, header)
			if !invalidRequest(st, body, "") {
				t.Errorf("Content-Type %q, %s %s: %d %.200s, want 400 invalid_request", ct, c.method, c.path, st, body)
			}
		}
	}
	nothingRecorded(t, rt)
	for i, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON"} {
		body := fmt.Sprintf(`{"clientRequestId":"json-%d"}`, i)
		if st, raw := request(t, "POST", srv.URL+"/v1/sandboxes", "", body, http.Header{"Content-Type": {ct}}); st != 201 {
			t.Errorf("Content-Type %q: %d %s, want 201", ct, st, raw)
		}
	}
	// Reconcile takes no body: sent without one, it needs no Content-Type.
	sb, err := rt.Create(context.Background(), sandbox.Spec{ClientRequestID: "reconciled"})
	if err != nil {
		t.Fatal(err)
	}
	if st, raw := request(t, "POST", srv.URL+"/v1/sandboxes/"+string(sb.ID)+"/actions/reconcile", "", "", nil); st != 200 {
		t.Errorf("reconcile without a body: %d %s", st, raw)
	}
}

func TestCheckAllowedHost(t *testing.T) {
	for _, ok := range []string{"sandboxd.internal", "a:1", "10.0.0.5", "10.0.0.5:4311", "[::1]", "[fe80::1]:80", "x_y.z"} {
		if err := CheckAllowedHost(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a:0", "a:65536", "a:x", "::1", "[::1", "[10.0.0.1]", "a b", "a/b", "a..b", "http://a", "a:+1", "a:01"} {
		if err := CheckAllowedHost(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
