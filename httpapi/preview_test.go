package httpapi

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
)

func TestPreviewTokens(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	c := &PreviewConfig{Secret: []byte(strings.Repeat("k", 32)), Now: func() time.Time { return now }}
	ref := sandbox.Ref{ID: "sbx_a", Generation: 2}
	tok := c.sign(ref, 8080, now.Add(time.Minute))
	if err := c.verify(tok, ref, 8080); err != nil {
		t.Fatal(err)
	}
	other := &PreviewConfig{Secret: []byte(strings.Repeat("j", 32)), Now: c.Now}
	for name, err := range map[string]error{
		"another port":       c.verify(tok, ref, 8081),
		"another sandbox":    c.verify(tok, sandbox.Ref{ID: "sbx_b", Generation: 2}, 8080),
		"another generation": c.verify(tok, sandbox.Ref{ID: "sbx_a", Generation: 3}, 8080),
		"another secret":     other.verify(tok, ref, 8080),
		"forged claims":      c.verify(strings.Split(c.sign(ref, 8081, now.Add(time.Minute)), ".")[0]+"."+strings.Split(tok, ".")[1], ref, 8081),
		"no signature":       c.verify(strings.Split(tok, ".")[0], ref, 8080),
		"empty":              c.verify("", ref, 8080),
		"too long":           c.verify(strings.Repeat("a", 600)+"."+"b", ref, 8080),
		"expired":            c.verify(c.sign(ref, 8080, now), ref, 8080),
	} {
		if !errors.Is(err, sandbox.ErrUnauthenticated) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestPreviewTokenIsNotPassedOn(t *testing.T) {
	h := http.Header{}
	h.Set(previewHeader, "t")
	h.Add("Cookie", "a=1; sandboxd_preview=t; b=2; __Host-sandboxd_preview=t")
	h.Add("Cookie", "sandboxd_preview=t; __Secure-sandboxd_preview=t")
	stripPreviewToken(h)
	if h.Get(previewHeader) != "" || strings.Join(h.Values("Cookie"), "|") != "a=1; b=2" {
		t.Errorf("passed on: %v", h)
	}
}

func TestPreviewURLs(t *testing.T) {
	for _, c := range []struct {
		cfg  PreviewConfig
		want string
	}{
		{PreviewConfig{Addr: "127.0.0.1:8443"}, "http://127.0.0.1:8443/p/sbx_a/80/"},
		{PreviewConfig{Addr: "127.0.0.1:8443", TLS: true}, "https://127.0.0.1:8443/p/sbx_a/80/"},
		{PreviewConfig{Addr: "[::]:443", Domain: "p.test", TLS: true}, "https://80-sbx_a.p.test/"},
		{PreviewConfig{Addr: "[::]:443", Domain: "p.test"}, "http://80-sbx_a.p.test:443/"},
		{PreviewConfig{Addr: "[::]:80", Domain: "p.test", TLS: true}, "https://80-sbx_a.p.test:80/"},
		{PreviewConfig{Addr: "[::]:80", Domain: "p.test"}, "http://80-sbx_a.p.test/"},
	} {
		if got := c.cfg.url("sbx_a", 80); got != c.want {
			t.Errorf("%+v: %s, want %s", c.cfg, got, c.want)
		}
	}
}

func TestPathAfter(t *testing.T) {
	for in, want := range map[string]string{
		"/v1/sandboxes/x/ports/80/":        "/",
		"/v1/sandboxes/x/ports/80/a/b%2Fc": "/a/b%2Fc",
		"/v1/sandboxes/x/ports/80":         "/",
	} {
		if got := pathAfter(in, 5); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
}
