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
	"github.com/sandboxd/sandbox/provider/oci"
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
		if i > 1500 { // python3's start on a loaded machine
			b.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkPortProxy: one small GET through the proxy to a server in a sandbox, beside the same GET
// to the same server program on the host (the floor), on kept-alive connections all; reports the
// p50. "proxied" reaches the port on a socket the daemon made in the sandbox's network namespace,
// "proxied-relay" through the agent's relay (what gVisor's sandboxes use); "socket-only" and
// "relay-only" are the same GET on a connection of either kind without the daemon's HTTP in front;
// "dial-socket" and "dial-relay" time a connection's making alone; "paired" takes a request of
// direct, proxied and proxied-relay in turn.
func BenchmarkPortProxy(b *testing.B) {
	e := newPortEnv(b)
	sb := e.create(b)
	e.serve(b, sb, "http", 8000)
	e.serve(b, sb, "http", 8001)
	ref := sandbox.Ref{ID: sb.ID, Generation: sb.Generation}
	direct := "http://" + hostPortServer(b, "http") + "/hello"
	dialer := func(relay bool) func(ctx context.Context, _, _ string) (net.Conn, error) {
		return func(ctx context.Context, _, _ string) (net.Conn, error) {
			oci.RelayPorts(e.p, relay)
			return e.p.DialPort(ctx, ref, 8000)
		}
	}
	b.Run("direct", func(b *testing.B) { timedGets(b, e.hc, direct, false) })
	b.Run("proxied", func(b *testing.B) { timedGets(b, e.hc, e.c.PortURL(sb.ID, 8000)+"hello", true) })
	b.Run("proxied-relay", func(b *testing.B) {
		oci.RelayPorts(e.p, true)
		defer oci.RelayPorts(e.p, false)
		timedGets(b, e.hc, e.c.PortURL(sb.ID, 8001)+"hello", true)
	})
	b.Run("socket-only", func(b *testing.B) {
		timedGets(b, &http.Client{Transport: &http.Transport{DialContext: dialer(false)}}, "http://sandbox/hello", false)
	})
	b.Run("relay-only", func(b *testing.B) {
		defer oci.RelayPorts(e.p, false)
		timedGets(b, &http.Client{Transport: &http.Transport{DialContext: dialer(true)}}, "http://sandbox/hello", false)
	})
	// The same three, one request of each in turn, so that the load of the moment weighs on all
	// alike: the ratios to read on a shared machine.
	b.Run("paired", func(b *testing.B) {
		reqs := []*http.Request{}
		for _, u := range []string{direct, e.c.PortURL(sb.ID, 8000) + "hello", e.c.PortURL(sb.ID, 8001) + "hello"} {
			req, _ := http.NewRequest("GET", u, nil)
			if u != direct {
				req.Header.Set("Authorization", "Bearer "+portToken)
			}
			reqs = append(reqs, req)
		}
		ds := make([][]time.Duration, len(reqs))
		for i := 0; i < b.N; i++ {
			for k, req := range reqs {
				oci.RelayPorts(e.p, k == 2) // the relay's port keeps the connections it made
				ds[k] = append(ds[k], timedGet(b, e.hc, req))
			}
		}
		oci.RelayPorts(e.p, false)
		d, s, r := p50(ds[0]), p50(ds[1]), p50(ds[2])
		b.ReportMetric(float64(d.Microseconds()), "direct-p50-µs")
		b.ReportMetric(float64(s.Microseconds()), "proxied-p50-µs")
		b.ReportMetric(float64(r.Microseconds()), "relay-p50-µs")
		b.ReportMetric(float64(s)/float64(d), "proxied/direct")
		b.ReportMetric(float64(r)/float64(d), "relay/direct")
	})
	for _, relay := range []bool{false, true} {
		name := map[bool]string{false: "dial-socket", true: "dial-relay"}[relay]
		b.Run(name, func(b *testing.B) {
			defer oci.RelayPorts(e.p, false)
			dial := dialer(relay)
			// At most 300: python3's server accepts slowly behind a backlog of 5, and a connect
			// past it waits a second for its SYN to be sent again.
			ds := make([]time.Duration, 0, b.N)
			for i := 0; i < min(b.N, 300); i++ {
				start := time.Now()
				conn, err := dial(ctxFor(b), "", "")
				if err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(start))
				conn.Close()
			}
			b.ReportMetric(float64(p50(ds).Microseconds()), "p50-µs")
		})
	}
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
		ds = append(ds, timedGet(b, hc, req))
	}
	b.StopTimer()
	b.ReportMetric(float64(p50(ds).Microseconds()), "p50-µs")
}

// timedGet sends req, reads its answer, and returns how long that took.
func timedGet(b *testing.B, hc *http.Client, req *http.Request) time.Duration {
	b.Helper()
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
	return time.Since(start)
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
