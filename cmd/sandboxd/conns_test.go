package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
)

// startServing is startMain, closed when the test ends; it returns the daemon's URL and address.
func startServing(t *testing.T, args ...string) (url, addr string) {
	t.Helper()
	m, url := startMain(t, args...)
	t.Cleanup(func() { m.Close() })
	return url, m.Addr()
}

// answerAndClose reads one answer on c and then waits for the daemon to close c. It returns the status
// (0 for none) and whether c was closed within giveUp.
func answerAndClose(c net.Conn, giveUp time.Duration) (int, bool) {
	c.SetReadDeadline(time.Now().Add(giveUp))
	br := bufio.NewReader(c)
	status := 0
	if resp, err := http.ReadResponse(br, nil); err == nil {
		status = resp.StatusCode
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	_, err := io.Copy(io.Discard, br)
	return status, err == nil || !errors.Is(err, os.ErrDeadlineExceeded)
}

// trickle writes one byte of body on c every interval until stop is closed or a write fails.
func trickle(c net.Conn, body string, interval time.Duration, stop <-chan struct{}) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := 0; i < len(body); i++ {
		select {
		case <-stop:
			return
		case <-tick.C:
			if _, err := io.WriteString(c, body[i:i+1]); err != nil {
				return
			}
		}
	}
}

// TestSlowBodyIsCutOff: a client that sends its body a byte at a time is cut off once
// --read-body-timeout has passed (it was held for as long as it kept sending), whether the handler
// reads the body (a create: 400) or not (a reconcile, whose body the server drains after the answer).
func TestSlowBodyIsCutOff(t *testing.T) {
	_, addr := startServing(t, "--read-body-timeout", "500ms")
	body := `{"clientRequestId":"slow"}` + strings.Repeat(" ", 974)
	for _, c := range []struct {
		path   string
		status int
	}{
		{"/v1/sandboxes", 400},
		{"/v1/sandboxes/sbx_none/actions/reconcile", 404},
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", c.path, addr, len(body))
		stop := make(chan struct{})
		go trickle(conn, body, 100*time.Millisecond, stop)
		start := time.Now()
		status, closed := answerAndClose(conn, 20*time.Second)
		close(stop)
		if status != c.status || !closed {
			t.Fatalf("%s, a body byte every 100ms: answered %d, closed %v after %v; want %d and closed",
				c.path, status, closed, time.Since(start).Round(time.Millisecond), c.status)
		}
		t.Logf("%s: slow body cut off after %v", c.path, time.Since(start).Round(time.Millisecond))
	}
}

// TestBodyTimeoutSparesLongRequests: the body deadline moves on as the body arrives (a second for every
// 64 KiB) and ends with it: a file write slower than --read-body-timeout but faster than 64 KiB/s is
// taken, a command that runs past it is not cancelled, and an event stream open past it goes on.
func TestBodyTimeoutSparesLongRequests(t *testing.T) {
	url, addr := startServing(t, "--read-body-timeout", "500ms")
	ctx := context.Background()
	var sb sandbox.Sandbox
	if st := call(ctx, "POST", url+"/v1/sandboxes", map[string]any{"clientRequestId": "long"}, &sb); st != 201 {
		t.Fatalf("create: %d", st)
	}
	waitFor(t, url, sb.ID, sandbox.StateReady)

	// 384 KiB in 1.5 s, 256 KiB/s: allowed 0.5 s and 6 s more by the time it is in.
	content := base64.StdEncoding.EncodeToString(make([]byte, 288<<10))
	body := fmt.Sprintf(`{"expectedGeneration":1,"path":"slow.bin","contentBase64":"%s"}`, content)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /v1/sandboxes/%s/files/content HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", sb.ID, addr, len(body))
	start := time.Now()
	for i := 0; i < len(body); i += 16 << 10 {
		if _, err := io.WriteString(conn, body[i:min(i+16<<10, len(body))]); err != nil {
			t.Fatalf("write cut after %v: %v", time.Since(start), err)
		}
		time.Sleep(62 * time.Millisecond)
	}
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a %d KiB write sent in %v: %v %v", len(body)>>10, time.Since(start).Round(time.Millisecond), resp, err)
	}
	resp.Body.Close()

	stream, err := http.Get(url + "/v1/events/stream?sandboxId=" + string(sb.ID))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	var res sandbox.CommandResult
	st := call(ctx, "POST", url+"/v1/sandboxes/"+string(sb.ID)+"/commands",
		map[string]any{"expectedGeneration": 1, "argv": []string{"sh", "-c", "sleep 1.5; echo done"}}, &res)
	if st != 200 || res.Cancelled || strings.TrimSpace(res.Stdout) != "done" {
		t.Fatalf("a command of 1.5 s under a 500ms body timeout: %d %+v", st, res)
	}
	// The stream has been open past the timeout and carries the command's event.
	sc := bufio.NewScanner(stream.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "event: "+string(sandbox.EventCommandCompleted)) {
			return
		}
	}
	t.Fatalf("the stream ended without the command's event: %v", sc.Err())
}

// TestConnectionLimit: with --max-connections 16, 40 clients that connect and keep their connections
// open get 16 served; the others wait, and are served as connections close.
func TestConnectionLimit(t *testing.T) {
	const limit, clients = 16, 40
	url, addr := startServing(t, "--max-connections", fmt.Sprint(limit))
	answered := make(chan net.Conn, clients)
	var conns []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
	})
	for range clients {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(time.Minute))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err == nil && resp.StatusCode == 200 {
				resp.Body.Close()
				answered <- c // kept open: it holds its place
			}
		}()
	}
	var served []net.Conn
	giveUp := time.After(30 * time.Second)
	for len(served) < limit {
		select {
		case c := <-answered:
			served = append(served, c)
		case <-giveUp:
			t.Fatalf("%d of %d clients served within 30s", len(served), limit)
		}
	}
	// No more than the limit, however long the others wait.
	select {
	case <-answered:
		t.Fatalf("more than %d connections served at once", limit)
	case <-time.After(time.Second):
	}
	// As served clients leave, the waiting ones are served in turn.
	for len(served) < clients {
		served[len(served)-1].Close()
		select {
		case c := <-answered:
			served = append(served, c)
		case <-giveUp:
			t.Fatalf("%d of %d clients served within 30s", len(served), clients)
		}
	}
	for _, c := range served {
		c.Close()
	}
	if st := call(context.Background(), "GET", url+"/healthz", nil, nil); st != 200 {
		t.Fatalf("healthz after the clients left: %d", st)
	}
}

// TestAllowedHostFlag: --allowed-host names hosts the API answers to, comma separated and repeatable,
// from SANDBOXD_ALLOWED_HOST unless given on the command line; any other name is refused.
func TestAllowedHostFlag(t *testing.T) {
	t.Setenv("SANDBOXD_ALLOWED_HOST", "env.example")
	m := NewMain(io.Discard)
	if err := m.ParseFlags(nil); err != nil || strings.Join(m.AllowedHosts, " ") != "env.example" {
		t.Fatalf("from the environment: %q %v", m.AllowedHosts, err)
	}
	m = NewMain(io.Discard)
	if err := m.ParseFlags([]string{"--allowed-host", "a.example, b.example:8080", "--allowed-host", "[::1]:9"}); err != nil ||
		strings.Join(m.AllowedHosts, " ") != "a.example b.example:8080 [::1]:9" {
		t.Fatalf("the command line over the environment: %q %v", m.AllowedHosts, err)
	}
	for _, bad := range [][]string{
		{"--allowed-host", "http://a.example"}, {"--allowed-host", "a.example:0"},
		{"--read-body-timeout", "0s"}, {"--idle-timeout", "-1s"}, {"--max-connections", "0"},
	} {
		if err := NewMain(io.Discard).ParseFlags(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	t.Setenv("SANDBOXD_ALLOWED_HOST", "")

	url, _ := startServing(t, "--allowed-host", "sandboxd.test")
	for host, want := range map[string]int{"sandboxd.test": 200, "sandboxd.test:4311": 200, "other.test": 400} {
		req, _ := http.NewRequest("GET", url+"/v1/sandboxes", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %q: %d, want %d", host, resp.StatusCode, want)
		}
	}
}
