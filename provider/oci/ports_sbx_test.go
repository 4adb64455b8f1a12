package oci_test

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestSbxPortForward: sbx port-forward listens on a local port and carries each connection to the
// sandbox's port, several at once, and ends cleanly on an interrupt.
func TestSbxPortForward(t *testing.T) {
	e := newPortEnvAuth(t, false) // sbx sends no token
	sb := e.create(t)
	e.serve(t, sb, "http", 8000)
	sbx := filepath.Join(t.TempDir(), "sbx")
	build := exec.Command("go", "build", "-o", sbx, "./cmd/sbx")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build sbx: %v\n%s", err, out)
	}
	cmd := exec.Command(sbx, "--url", e.st.URL, "port-forward", string(sb.ID), "0:8000")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = os.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }() // reaped: no zombie for a later test to count
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, stderr)
	m := regexp.MustCompile(`Forwarding (127\.0\.0\.1:\d+) -> `).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("sbx said %q", line)
	}
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: i%2 == 0}, Timeout: 30 * time.Second}
			for j := 0; j < 3; j++ {
				resp, err := hc.Get("http://" + m[1] + "/fwd")
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != "hello from /fwd" {
					t.Errorf("through sbx: %q", b)
				}
			}
		}()
	}
	wg.Wait()
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("sbx port-forward ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("sbx port-forward did not end on SIGINT")
	}
}
