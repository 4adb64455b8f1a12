package httpapi

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox"
)

func authServer(t *testing.T, tokens *Tokens) *httptest.Server {
	t.Helper()
	_, srv := serve(t, Config{Tokens: tokens})
	return srv
}

// send sends one request with an optional Authorization header and returns the status and body.
func send(t *testing.T, method, url, auth, body string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, resp.Header
}

func TestAuthRefusesMissingAndWrongTokens(t *testing.T) {
	toks, err := NewTokens("s3cret-token-one", "token-two")
	if err != nil {
		t.Fatal(err)
	}
	srv := authServer(t, toks)
	for _, auth := range []string{
		"",                               // missing
		"Bearer wrong",                   // wrong
		"Bearer s3cret-token-on",         // a prefix of a right one
		"Bearer s3cret-token-one-x",      // a right one with more
		"Basic czNjcmV0LXRva2VuLW9uZQ==", // another scheme
		"Bearer",                         // no token
		"s3cret-token-one",               // no scheme
	} {
		st, body, h := send(t, "GET", srv.URL+"/v1/sandboxes", auth, "")
		er := decodeError(t, body)
		if st != 401 || er.Error.Code != sandbox.CodeUnauthenticated || !errors.Is(sandbox.ErrorForCode(er.Error.Code), sandbox.ErrUnauthenticated) {
			t.Errorf("Authorization %q: %d %s, want 401 unauthenticated", auth, st, body)
		}
		if !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("Authorization %q: 401 without a Bearer challenge", auth)
		}
		if strings.Contains(string(body), "s3cret") {
			t.Errorf("a 401 echoes a token: %s", body)
		}
	}
	for _, auth := range []string{"Bearer s3cret-token-one", "Bearer token-two", "bearer token-two"} {
		if st, body, _ := send(t, "GET", srv.URL+"/v1/sandboxes", auth, ""); st != 200 {
			t.Errorf("Authorization %q: %d %s, want 200", auth, st, body)
		}
	}
}

// TestAuthOrderOfChecks: route and method come first, then authentication, then the body limit and
// validation; /healthz stays open.
func TestAuthOrderOfChecks(t *testing.T) {
	toks, _ := NewTokens("tok")
	srv := authServer(t, toks)
	cases := []struct {
		method, path, auth, body string
		status                   int
		code                     sandbox.ErrorCode
	}{
		{"GET", "/no/such/route", "", "", 404, sandbox.CodeNotFound},
		{"DELETE", "/v1/sandboxes", "", "", 405, sandbox.CodeMethodNotAllowed},
		{"POST", "/v1/sandboxes", "", `{"not":"valid"}`, 401, sandbox.CodeUnauthenticated},
		{"POST", "/v1/sandboxes", "Bearer bad", `{`, 401, sandbox.CodeUnauthenticated},
		{"POST", "/v1/sandboxes", "Bearer tok", `{`, 400, sandbox.CodeInvalidRequest},
		{"GET", "/v1/sandboxes/sbx_nope", "", "", 401, sandbox.CodeUnauthenticated},
		{"GET", "/v1/sandboxes/sbx_nope", "Bearer tok", "", 404, sandbox.CodeNotFound},
		{"GET", "/v1/events/stream", "", "", 401, sandbox.CodeUnauthenticated},
		{"GET", "/v1/events?after=x", "", "", 401, sandbox.CodeUnauthenticated},
	}
	for _, c := range cases {
		st, body, _ := send(t, c.method, srv.URL+c.path, c.auth, c.body)
		if er := decodeError(t, body); st != c.status || er.Error.Code != c.code {
			t.Errorf("%s %s (%q): %d %s, want %d %s", c.method, c.path, c.auth, st, body, c.status, c.code)
		}
	}
	if st, body, _ := send(t, "GET", srv.URL+"/healthz", "", ""); st != 200 {
		t.Fatalf("/healthz without a token: %d %s", st, body)
	}
}

// TestAuthRefusesBeforeReadingTheBody: an unauthenticated client cannot make the server read a body.
func TestAuthRefusesBeforeReadingTheBody(t *testing.T) {
	toks, _ := NewTokens("tok")
	srv := authServer(t, toks)
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/v1/sandboxes", pr)
	req.ContentLength = -1 // chunked: the server cannot know the size without reading
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("status %d, want 401 before the body is sent", resp.StatusCode)
	}
}

func TestTokensReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("# comment\n\n  old-token  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	toks := &Tokens{}
	if toks.Valid("") || toks.Valid("old-token") {
		t.Fatal("an empty set accepts a token")
	}
	if err := toks.Load(path); err != nil {
		t.Fatal(err)
	}
	if !toks.Valid("old-token") || toks.Valid("new-token") {
		t.Fatal("loaded set is wrong")
	}
	os.WriteFile(path, []byte("new-token\nother-token\n"), 0o600)
	if err := toks.Load(path); err != nil {
		t.Fatal(err)
	}
	if toks.Valid("old-token") || !toks.Valid("new-token") || !toks.Valid("other-token") {
		t.Fatal("reload did not replace the set")
	}
	// A bad file keeps the set in force.
	for _, bad := range []string{"", "# only a comment\n", "three words here\n", "bad/name token\n"} {
		os.WriteFile(path, []byte(bad), 0o600)
		if err := toks.Load(path); err == nil {
			t.Errorf("token file %q loaded", bad)
		}
		if !toks.Valid("new-token") {
			t.Fatalf("a failed reload of %q dropped the tokens in force", bad)
		}
	}
	if err := toks.Load(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	// A line of two words names its token: the name is what the audit log says; a token without one
	// is named by its digest, which does not give it away.
	os.WriteFile(path, []byte("ci-runner new-token\nother-token\n"), 0o600)
	if err := toks.Load(path); err != nil {
		t.Fatal(err)
	}
	if name, ok := toks.Name("new-token"); !ok || name != "ci-runner" {
		t.Errorf("named token: %q %v", name, ok)
	}
	if name, ok := toks.Name("other-token"); !ok || !strings.HasPrefix(name, "sha256:") || strings.Contains(name, "other") {
		t.Errorf("unnamed token: %q %v", name, ok)
	}
	if _, ok := toks.Name("ci-runner"); ok {
		t.Error("a token's name is accepted as a token")
	}
	if _, err := NewTokens(); err == nil {
		t.Fatal("NewTokens with no token succeeded")
	}
	if _, err := NewTokens("a", ""); err == nil {
		t.Fatal("NewTokens with an empty token succeeded")
	}
}

func BenchmarkTokensValid(b *testing.B) {
	toks, _ := NewTokens("a-rather-long-bearer-token-of-forty-chars", "another")
	for b.Loop() {
		toks.Valid("a-rather-long-bearer-token-of-forty-chart")
	}
}
