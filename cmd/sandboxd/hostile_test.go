package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// rssKiB reads the resident set size of a process from /proc.
func rssKiB(t *testing.T, pid int) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// raiseNoFile lifts this process's open-file limit to the hard limit; the daemon inherits it.
func raiseNoFile(t *testing.T, need uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Max < need {
		t.Fatalf("the hard open-file limit %d is under the %d this test needs", lim.Max, need)
	}
	old := lim.Cur
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		lim.Cur = old
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	})
}

// memoryBoundKiB is the documented bound (docs/reliability.md) on how much a hostile workload may grow
// the daemon's resident memory.
const memoryBoundKiB = 256 << 10

// TestOutputFloodKeepsMemoryBounded runs commands that write 1 GiB each, two at a time: the answers are
// truncated at the cap and the daemon's memory stays within the bound.
func TestOutputFloodKeepsMemoryBounded(t *testing.T) {
	d := startDaemon(t, testenv.StateDir(t))
	ctx := context.Background()
	var sb sandbox.Sandbox
	if st := call(ctx, "POST", d.url+"/v1/sandboxes", map[string]any{"clientRequestId": "flood"}, &sb); st != 201 {
		t.Fatalf("create: %d", st)
	}
	before := rssKiB(t, d.cmd.Process.Pid)
	var wg sync.WaitGroup
	results := make([]sandbox.CommandResult, 2)
	statuses := make([]int, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = call(ctx, "POST", d.url+"/v1/sandboxes/"+string(sb.ID)+"/commands", map[string]any{
				"expectedGeneration": 1, "timeoutSeconds": 120,
				"argv": []string{"sh", "-c", "head -c 1073741824 /dev/zero; head -c 1073741824 /dev/zero >&2"},
			}, &results[i])
		}()
	}
	wg.Wait()
	after := rssKiB(t, d.cmd.Process.Pid)
	for i, r := range results {
		if statuses[i] != 200 || !r.Truncated || r.ExitCode == nil || *r.ExitCode != 0 || len(r.Stdout) != sandbox.DefaultMaxOutputBytes {
			t.Fatalf("flood %d: %d, truncated %v, exit %v, %d bytes of stdout", i, statuses[i], r.Truncated, r.ExitCode, len(r.Stdout))
		}
	}
	t.Logf("4 GiB of output: RSS %d KiB before, %d KiB after", before, after)
	if after-before > memoryBoundKiB {
		t.Fatalf("RSS grew by %d KiB, over the bound of %d KiB", after-before, memoryBoundKiB)
	}
}

// TestSlowHeaderClientIsCutOff: a client that trickles its headers is disconnected after the read header
// timeout, while others are served.
func TestSlowHeaderClientIsCutOff(t *testing.T) {
	d := startDaemon(t, testenv.StateDir(t), "--read-header-timeout", "300ms")
	conn, err := net.Dial("tcp", strings.TrimPrefix(d.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	cut := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, conn) // returns when the server closes the connection
		cut <- err
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(30 * time.Second)
	for i := 0; ; i++ {
		select {
		case <-cut:
			if st := call(context.Background(), "GET", d.url+"/healthz", nil, nil); st != 200 {
				t.Fatalf("healthz after the slow client: %d", st)
			}
			t.Logf("slow-header client cut off after %d header lines", i)
			return
		case <-tick.C:
			fmt.Fprintf(conn, "X-Slow-%d: 1\r\n", i) // an error means the server closed: seen on the next turn
		case <-giveUp:
			t.Fatal("a client trickling headers for 30s was never cut off")
		}
	}
}

// countingReader is an endless body that counts what the server made the client send.
type countingReader struct{ n atomic.Int64 }

func (r *countingReader) Read(p []byte) (int, error) {
	r.n.Add(int64(len(p)))
	return len(p), nil
}

// TestHugeBodyIsRefusedEarly: a body announced larger than the limit is refused before it is read; an
// endless chunked body is cut at the limit.
func TestHugeBodyIsRefusedEarly(t *testing.T) {
	d := startDaemon(t, testenv.StateDir(t))
	// Announced: 10 GiB, of which only the headers are sent before the answer.
	addr := strings.TrimPrefix(d.url, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /v1/sandboxes/sbx_x/files/content HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", addr, int64(10)<<30)
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a 10 GiB announcement before its body: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Fatalf("10 GiB announced: %d, want 413", resp.StatusCode)
	}
	// Endless, chunked: the server stops reading at the limit.
	body := &countingReader{}
	req, _ := http.NewRequest("PUT", d.url+"/v1/sandboxes/sbx_x/files/content", io.NopCloser(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != 413 {
			t.Fatalf("endless body: %d, want 413", resp.StatusCode)
		}
	}
	if sent := body.n.Load(); sent > 2*32<<20 {
		t.Fatalf("the server read %d bytes of an endless body, over twice the 32 MiB limit", sent)
	}
	t.Logf("endless body cut after %d bytes sent", body.n.Load())
}

// TestThousandsOfSubscribersAndSandboxes: 2000 event-stream subscribers all get a new event, then 3000
// sandboxes are all listed, with the daemon's memory within the bound.
func TestThousandsOfSubscribersAndSandboxes(t *testing.T) {
	const subscribers, sandboxes = 2000, 3000
	raiseNoFile(t, 2*subscribers+1000)
	d := startDaemon(t, testenv.StateDir(t))
	addr := strings.TrimPrefix(d.url, "http://")
	before := rssKiB(t, d.cmd.Process.Pid)

	conns := openStreams(t, net.Dial, addr, "/v1/events/stream", subscribers)
	ready := make(chan *bufio.Reader, subscribers)
	for _, c := range conns {
		c.SetDeadline(time.Now().Add(2 * time.Minute))
		ready <- bufio.NewReader(c)
	}
	close(ready)
	var sb sandbox.Sandbox
	if st := call(context.Background(), "POST", d.url+"/v1/sandboxes", map[string]any{"clientRequestId": "fanout"}, &sb); st != 201 {
		t.Fatalf("create: %d", st)
	}
	var got atomic.Int32
	var wg sync.WaitGroup
	for br := range ready {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				if strings.HasPrefix(line, "data: ") && strings.Contains(line, string(sb.ID)) {
					got.Add(1)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got.Load() != subscribers {
		t.Fatalf("%d of %d subscribers got the event", got.Load(), subscribers)
	}
	withStreams := rssKiB(t, d.cmd.Process.Pid)
	// The subscribers go away: a stream nobody reads is dropped by its write timeout, but until then
	// each one holds a page of the log, which is not what this part measures.
	for _, c := range conns {
		c.Close()
	}
	conns = nil

	made := createMany(d.url, "many", sandboxes-1)
	resp, err := http.Get(d.url + "/v1/sandboxes")
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Sandboxes []sandbox.Sandbox }
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&list); err != nil || len(list.Sandboxes) != sandboxes {
		t.Fatalf("listing: %v, %d sandboxes (made %d+1), want %d", err, len(list.Sandboxes), made, sandboxes)
	}
	after := rssKiB(t, d.cmd.Process.Pid)
	t.Logf("RSS %d KiB idle, %d KiB with %d streams, %d KiB with %d sandboxes listed (%d KiB of JSON)",
		before, withStreams, subscribers, after, sandboxes, len(raw)>>10)
	if after-before > memoryBoundKiB {
		t.Fatalf("RSS grew by %d KiB, over the bound of %d KiB", after-before, memoryBoundKiB)
	}
}

// TestStalledSubscribersHoldLittle: 2000 event-stream subscribers that stop reading (a small receive
// window, nothing read) while 3000 sandboxes are created cost the daemon a bounded amount of memory:
// each stream reads the log a small page at a time and holds at most that page while its write waits.
func TestStalledSubscribersHoldLittle(t *testing.T) {
	const subscribers, sandboxes = 2000, 3000
	raiseNoFile(t, 2*subscribers+1000)
	d := startDaemon(t, testenv.StateDir(t))
	addr := strings.TrimPrefix(d.url, "http://")
	before := rssKiB(t, d.cmd.Process.Pid)

	dialer := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	openStreams(t, dialer.Dial, addr, "/v1/events/stream?after=0", subscribers)

	if made := createMany(d.url, "stalled", sandboxes); made != sandboxes {
		t.Fatalf("%d of %d creates answered 201", made, sandboxes)
	}
	stalled := rssKiB(t, d.cmd.Process.Pid)
	t.Logf("RSS %d KiB idle, %d KiB with %d stalled streams after %d creates", before, stalled, subscribers, sandboxes)
	if stalled-before > memoryBoundKiB {
		t.Fatalf("RSS grew by %d KiB, over the bound of %d KiB", stalled-before, memoryBoundKiB)
	}
}

// createMany creates n sandboxes, prefix-1 to prefix-n, from 16 clients at once, and returns how many
// creates were answered 201.
func createMany(url, prefix string, n int) int {
	var next, made atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); int(i) <= n; i = next.Add(1) {
				if call(context.Background(), "POST", url+"/v1/sandboxes", map[string]any{"clientRequestId": fmt.Sprintf("%s-%d", prefix, i)}, nil) == 201 {
					made.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return int(made.Load())
}

// openStreams opens n event streams of path on addr, each on a connection made by dial, and closes
// them when the test ends.
func openStreams(t *testing.T, dial func(network, addr string) (net.Conn, error), addr, path string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range n {
		c, err := dial("tcp", addr)
		if err != nil {
			t.Fatalf("subscriber %d: %v", len(conns), err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", path, addr)
	}
	return conns
}
