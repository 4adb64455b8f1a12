package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:4311": true, "127.0.0.2:1": true, "[::1]:4311": true, "localhost:80": true, "LOCALHOST:80": true,
		":4311": false, "0.0.0.0:4311": false, "[::]:4311": false, "10.0.0.1:4311": false,
		"example.com:4311": false, "127.0.0.1": false, "": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestNonLoopbackNeedsTokens: the daemon refuses to start on an address other hosts can reach unless
// bearer tokens are configured.
func TestNonLoopbackNeedsTokens(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokens, []byte("tok\n"), 0o600)
	for _, c := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--listen", "0.0.0.0:4311"}, false},
		{[]string{"--listen", ":4311"}, false},
		{[]string{"--listen", "192.168.1.10:4311"}, false},
		{[]string{"--listen", "0.0.0.0:4311", "--auth-token-file", tokens}, true},
		{[]string{"--listen", "127.0.0.1:4311"}, true},
		{[]string{"--read-header-timeout", "0s"}, false},
	} {
		m := NewMain(io.Discard)
		err := m.ParseFlags(c.args)
		if (err == nil) != c.ok {
			t.Errorf("ParseFlags(%q): %v, want ok=%v", c.args, err, c.ok)
		}
		if err != nil && !c.ok && strings.Contains(c.args[1], "4311") && !strings.Contains(err.Error(), "--auth-token-file") {
			t.Errorf("ParseFlags(%q): error %q does not say what to set", c.args, err)
		}
	}
	// Run checks again, for a Main configured without ParseFlags.
	m := NewMain(io.Discard)
	m.Listen, m.DataDir, m.Provider = "0.0.0.0:0", t.TempDir(), "host"
	if err := m.Run(context.Background()); err == nil {
		m.Close()
		t.Fatal("Run served on 0.0.0.0 without tokens")
	}
	m.Close()
}

func getStatus(t *testing.T, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestTokenRotationOnSIGHUP runs the built daemon with a token file, rotates the token and sends SIGHUP.
func TestTokenRotationOnSIGHUP(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("first-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, t.TempDir(), "--auth-token-file", tokens)
	if st := getStatus(t, d.url+"/v1/sandboxes", ""); st != 401 {
		t.Fatalf("no token: %d, want 401", st)
	}
	if st := getStatus(t, d.url+"/healthz", ""); st != 200 {
		t.Fatalf("/healthz without a token: %d, want 200", st)
	}
	if st := getStatus(t, d.url+"/v1/sandboxes", "first-token"); st != 200 {
		t.Fatalf("first token: %d, want 200", st)
	}
	// Rotation: both tokens for a while, then only the new one.
	steps := []struct {
		file          string
		first, second int
	}{
		{"first-token\nsecond-token\n", 200, 200},
		{"second-token\n", 401, 200},
		{"", 401, 200}, // an empty file is refused: the tokens in force stay
	}
	for _, s := range steps {
		if err := os.WriteFile(tokens, []byte(s.file), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			f, sec := getStatus(t, d.url+"/v1/sandboxes", "first-token"), getStatus(t, d.url+"/v1/sandboxes", "second-token")
			if f == s.first && sec == s.second {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after SIGHUP with %q: first %d second %d, want %d %d", s.file, f, sec, s.first, s.second)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	select {
	case <-d.done:
		t.Fatal("the daemon exited on SIGHUP")
	default:
	}
}
