package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// testPKI is a certificate authority the test makes, and the files of a leaf it signed.
type testPKI struct {
	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
	pool  *x509.CertPool
	cert  string // PEM leaf
	key   string // PEM key of the leaf
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "preview test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{ca: ca, caKey: key, pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	dir := t.TempDir()
	p.cert, p.key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	p.issue(t, 2)
	return p
}

// issue writes a leaf for *.preview.test and 127.0.0.1 with serial, and its key.
func (p *testPKI) issue(t *testing.T, serial int64) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "*.preview.test"},
		DNSNames: []string{"*.preview.test"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writeAtomically(t, p.key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
	writeAtomically(t, p.cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func writeAtomically(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// TestPreviewTLSFlags: the certificate and key go together and with --preview-listen, and a pair that
// cannot be served stops the daemon at start with an error naming the flag and the file.
func TestPreviewTLSFlags(t *testing.T) {
	pki := newTestPKI(t)
	for _, bad := range [][]string{
		{"--preview-listen", "127.0.0.1:0", "--preview-tls-cert", pki.cert},
		{"--preview-listen", "127.0.0.1:0", "--preview-tls-key", pki.key},
		{"--preview-tls-cert", pki.cert, "--preview-tls-key", pki.key},
	} {
		if err := NewMain(io.Discard).ParseFlags(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := newTestPKI(t) // a key of another certificate
	for _, c := range []struct {
		cert, key string
		says      []string
	}{
		{filepath.Join(dir, "none.pem"), pki.key, []string{"--preview-tls-cert", "none.pem", "no such file"}},
		{pki.cert, filepath.Join(dir, "none.pem"), []string{"--preview-tls-key", "none.pem", "no such file"}},
		{garbage, pki.key, []string{"--preview-tls-cert", "garbage.pem", "PEM"}},
		{pki.cert, garbage, []string{"--preview-tls-key", "garbage.pem", "PEM"}},
		{pki.cert, other.key, []string{"--preview-tls-cert", "does not match"}},
	} {
		m := NewMain(io.Discard)
		if err := m.ParseFlags([]string{"--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--provider", "host",
			"--preview-listen", "127.0.0.1:0", "--preview-tls-cert", c.cert, "--preview-tls-key", c.key}); err != nil {
			t.Fatal(err)
		}
		err := m.Run(context.Background())
		m.Close()
		for _, s := range c.says {
			if err == nil || !strings.Contains(err.Error(), s) {
				t.Errorf("cert %s key %s: %v, want it to say %q", c.cert, c.key, err, s)
			}
		}
	}
}

// previewEcho answers every GET with the path, the scheme the proxy says it was asked in, and the
// cookies it was sent.
const previewEcho = `import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = ("path=%s proto=%s cookie=%s" % (self.path, self.headers.get("X-Forwarded-Proto"), self.headers.get("Cookie"))).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", 8000), H).serve_forever()
`

// TestPreviewTLS: with --preview-tls-cert and --preview-tls-key the preview listener serves HTTPS with
// a certificate of the test's own authority: a token opens a port of a real sandbox in both forms,
// its cookie is Secure, HttpOnly and SameSite=Lax under a __Host- (or __Secure-) name, answers carry
// HSTS, a token for one port is refused on another, plain http is refused, and a certificate written
// over the file is served from the next handshake (a broken one is not, and SIGHUP is harmless).
func TestPreviewTLS(t *testing.T) {
	needOCI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pki := newTestPKI(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listener := ln.Addr().String()
	_, port, _ := net.SplitHostPort(listener)
	ln.Close()
	dataDir := testenv.StateDir(t)
	removeContainersAtEnd(t, dataDir)
	d := startDaemon(t, dataDir, "--provider", "oci", "--oci-warm-pool", "0", "--preview-listen", listener,
		"--preview-domain", "preview.test", "--preview-tls-cert", pki.cert, "--preview-tls-key", pki.key)
	c, err := client.New(d.url)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Create(ctx, sandbox.Spec{})
	if err == nil {
		sb, err = c.WaitState(ctx, sb.ID, sandbox.StateReady)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartProcess(ctx, sb.ID, sb.Generation, sandbox.ProcessSpec{Argv: []string{"python3", "-c", previewEcho}}); err != nil {
		t.Fatal(err)
	}
	wait := "import socket,time\nfor i in range(200):\n try:\n  socket.create_connection(('127.0.0.1',8000)).close(); break\n except OSError: time.sleep(0.05)\nelse: raise SystemExit(1)"
	if res, err := c.Exec(ctx, sb.ID, sb.Generation, sandbox.Command{Argv: []string{"python3", "-c", wait}}); err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("the server did not listen: %v %+v", err, res)
	}
	tok, err := c.PreviewToken(ctx, sb.ID, 8000, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	host := "https://8000-" + string(sb.ID) + ".preview.test:" + port + "/"
	if !strings.HasPrefix(tok.URL, host+"?sandboxd_preview=") {
		t.Fatalf("preview URL %s, want it under %s", tok.URL, host)
	}

	// A browser of the test's authority; the test's resolver knows no preview.test, so every name
	// is dialled at the listener.
	dialer := &net.Dialer{}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, listener)
		}}
	defer tr.CloseIdleConnections()
	noRedirect := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(u string, h http.Header) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	cookieOf := func(resp *http.Response) *http.Cookie {
		t.Helper()
		if len(resp.Cookies()) != 1 {
			t.Fatalf("cookies %v", resp.Header.Values("Set-Cookie"))
		}
		return resp.Cookies()[0]
	}

	// The host form: the visit with the token is answered with a Secure cookie and a redirect.
	resp, _ := get(strings.Replace(tok.URL, "/?", "/hello?", 1), nil)
	ck := cookieOf(resp)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/hello" || ck.Name != "__Host-sandboxd_preview" ||
		!ck.Secure || !ck.HttpOnly || ck.SameSite != http.SameSiteLaxMode || ck.Path != "/" || ck.Domain != "" || ck.Value != tok.Token {
		t.Errorf("the token's visit: %d to %q, cookie %+v", resp.StatusCode, resp.Header.Get("Location"), ck)
	}
	if hsts := resp.Header.Get("Strict-Transport-Security"); hsts != "max-age=31536000" {
		t.Errorf("HSTS %q", hsts)
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Transport: tr, Jar: jar}
	bresp, err := browser.Get(strings.Replace(tok.URL, "/?", "/hello?", 1))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(bresp.Body)
	bresp.Body.Close()
	if bresp.StatusCode != 200 || string(b) != "path=/hello proto=https cookie=None" {
		t.Errorf("the host form in a browser: %d %q", bresp.StatusCode, b)
	}
	// The cookie of the visit, beside the application's own: only the application's is passed on.
	cookies := http.Header{"Cookie": {"app=1; __Host-sandboxd_preview=" + tok.Token}}
	if resp, body := get(host+"again", cookies); resp.StatusCode != 200 || body != "path=/again proto=https cookie=app=1" {
		t.Errorf("with the cookie: %d %q", resp.StatusCode, body)
	}
	// A cookie of the whole domain, set by another host of it, does not hide this host's own.
	tossed := http.Header{"Cookie": {"sandboxd_preview=" + strings.Repeat("A", 40) + "; __Host-sandboxd_preview=" + tok.Token}}
	if resp, body := get(host, tossed); resp.StatusCode != 200 {
		t.Errorf("beside a tossed cookie: %d %q", resp.StatusCode, body)
	}

	// The path form, over TLS too: its cookie is __Secure- and scoped to the path.
	pathURL := "https://" + listener + "/p/" + string(sb.ID) + "/8000/"
	resp, _ = get(pathURL+"?sandboxd_preview="+tok.Token, nil)
	if ck := cookieOf(resp); resp.StatusCode != http.StatusSeeOther || ck.Name != "__Secure-sandboxd_preview" || !ck.Secure ||
		!ck.HttpOnly || ck.Path != "/p/"+string(sb.ID)+"/8000/" {
		t.Errorf("the path form's visit: %d, cookie %+v", resp.StatusCode, ck)
	}
	withToken := http.Header{"X-Sandboxd-Preview-Token": {tok.Token}}
	if resp, body := get(pathURL+"x", withToken); resp.StatusCode != 200 || body != "path=/x proto=https cookie=None" {
		t.Errorf("the path form with the header: %d %q", resp.StatusCode, body)
	}

	// The token of port 8000 opens no other port, in either form, and the refusal carries HSTS too.
	for _, u := range []string{"https://8001-" + string(sb.ID) + ".preview.test:" + port + "/", "https://" + listener + "/p/" + string(sb.ID) + "/8001/"} {
		resp, body := get(u, withToken)
		if resp.StatusCode != 401 || !strings.Contains(body, "unauthenticated") || resp.Header.Get("Strict-Transport-Security") == "" {
			t.Errorf("the token of 8000 at %s: %d %q", u, resp.StatusCode, body)
		}
		cookie := http.Header{"Cookie": {"__Host-sandboxd_preview=" + tok.Token}}
		if resp, _ := get(u+"?sandboxd_preview="+tok.Token, cookie); resp.StatusCode != 401 || len(resp.Cookies()) != 0 {
			t.Errorf("the token of 8000 at %s in the URL: %d %v", u, resp.StatusCode, resp.Cookies())
		}
	}

	// Plain http to the TLS listener: a 400 that says so, never the port.
	plain, err := http.Get("http://" + listener + "/p/" + string(sb.ID) + "/8000/?sandboxd_preview=" + tok.Token)
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := io.ReadAll(plain.Body)
	plain.Body.Close()
	if plain.StatusCode != 400 || !strings.Contains(string(pb), "HTTPS") || len(plain.Cookies()) != 0 {
		t.Errorf("plain http: %d %q", plain.StatusCode, pb)
	}

	// A certificate written over the files is served from the next handshake.
	served := func() int64 {
		t.Helper()
		conn, err := tls.Dial("tcp", listener, &tls.Config{RootCAs: pki.pool, ServerName: "1-x.preview.test"})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if s := served(); s != 2 {
		t.Fatalf("serial %d served, want 2", s)
	}
	pki.issue(t, 3)
	if s := served(); s != 3 {
		t.Errorf("serial %d served after the files changed, want 3", s)
	}
	writeAtomically(t, pki.cert, []byte("broken\n"))
	if s := served(); s != 3 {
		t.Errorf("serial %d served after a broken write, want 3 still", s)
	}
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	pki.issue(t, 4)
	if s := served(); s != 4 {
		t.Errorf("serial %d served after SIGHUP and a new pair, want 4", s)
	}
	if resp, body := get(host+strconv.Itoa(4), withToken); resp.StatusCode != 200 {
		t.Errorf("after the reloads: %d %q", resp.StatusCode, body)
	}
}
