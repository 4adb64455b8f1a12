package oci_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
)

// hostPortServer runs portserver.py in mode on the host, the floor of the ports benchmarks: the same
// server the sandbox runs, reached without the proxy. It returns its address.
func hostPortServer(b *testing.B, mode string) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	script := filepath.Join(b.TempDir(), "portserver.py")
	if err := os.WriteFile(script, portServer, 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("python3", script, mode, strconv.Itoa(port))
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return addr
		}
		if i > 200 {
			b.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkPortProxy: one small GET through the proxy to a server in a sandbox, beside the same GET
// to the same server program on the host (the floor), on kept-alive connections both; reports the p50.
func BenchmarkPortProxy(b *testing.B) {
	e := newPortEnv(b)
	sb := e.create(b)
	e.serve(b, sb, "http", 8000)
	direct := "http://" + hostPortServer(b, "http") + "/hello"
	b.Run("direct", func(b *testing.B) { timedGets(b, e.hc, direct, false) })
	b.Run("proxied", func(b *testing.B) { timedGets(b, e.hc, e.c.PortURL(sb.ID, 8000)+"hello", true) })
	// The agent's relay alone, without the daemon's HTTP in front: where the proxy's time goes.
	relayed := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return e.p.DialPort(ctx, sandbox.Ref{ID: sb.ID, Generation: sb.Generation}, 8000)
	}}}
	b.Run("relay-only", func(b *testing.B) { timedGets(b, relayed, "http://sandbox/hello", false) })
}

// BenchmarkPortForward: 256 MiB read from a server in a sandbox over the TCP relay (one WebSocket,
// as sbx port-forward makes for each connection), beside the same read from the same server program
// on the host over plain TCP (the floor).
func BenchmarkPortForward(b *testing.B) {
	const n = 256 << 20
	e := newPortEnv(b)
	sb := e.create(b)
	e.serve(b, sb, "zeros", 8004)
	addr := hostPortServer(b, "zeros")
	b.Run("direct", func(b *testing.B) {
		b.SetBytes(n)
		for i := 0; i < b.N; i++ {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			readZeros(b, conn, n)
		}
	})
	b.Run("forwarded", func(b *testing.B) {
		b.SetBytes(n)
		for i := 0; i < b.N; i++ {
			conn, err := e.c.DialPort(ctxFor(b), sb.ID, 8004)
			if err != nil {
				b.Fatal(err)
			}
			readZeros(b, conn, n)
		}
	})
}

func p50(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func timedGets(b *testing.B, hc *http.Client, u string, auth bool) {
	b.Helper()
	ds := make([]time.Duration, 0, b.N)
	req, _ := http.NewRequest("GET", u, nil)
	if auth {
		req.Header.Set("Authorization", "Bearer "+portToken)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		ds = append(ds, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(float64(p50(ds).Microseconds()), "p50-µs")
}

func readZeros(b *testing.B, conn net.Conn, n int64) {
	b.Helper()
	defer conn.Close()
	fmt.Fprintf(conn, "%d\n", n)
	buf := make([]byte, 256<<10)
	var got int64
	var err error
	for err == nil {
		var k int
		k, err = conn.Read(buf)
		got += int64(k)
	}
	if err != io.EOF || got != n {
		b.Fatalf("read %d of %d bytes: %v", got, n, err)
	}
}
