package oci_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/oci"
)

// BenchmarkCreateNetwork times create-to-ready of a sandbox with a network (egress allow) beside its
// floor, one on loopback only (no policy), alternating in the same run; "network-x" is the ratio of the
// two p50s (goal: at most 1.2). pool=0 starts a container each time; pool=1 keeps one warm pool entry
// of each kind, one without a link and one with its link made ahead (NetworkConfig.WarmPoolLinks),
// and each create takes the one for it (the pool is refilled between iterations, off the clock).
// Without "_ipv6" the provider has no IPv6 pool (IPv4 only); with it, every link has IPv6 too.
func BenchmarkCreateNetwork(b *testing.B) {
	for _, c := range []struct {
		warm int
		ipv6 bool
	}{{0, false}, {1, false}, {0, true}, {1, true}} {
		warm := c.warm
		name := map[int]string{0: "pool=0", 1: "pool=1"}[warm]
		if c.ipv6 {
			name += "_ipv6"
		}
		b.Run(name, func(b *testing.B) {
			in := newInternet(b)
			p := netProvider(b, in, testenv.StateDir(b), func(cfg *oci.Config) {
				cfg.WarmPool, cfg.Network.WarmPoolLinks = 2*warm, warm
				if !c.ipv6 {
					cfg.Network.Pool6 = netip.Prefix{}
				}
			})
			ctx := context.Background()
			var plain, networked []time.Duration
			var refs []sandbox.Ref
			for i := 0; i < b.N; i++ {
				policies := []string{"", `{"egress":"allow"}`}
				if i%2 == 1 { // each first in turn: neither comes always after the other's refill
					slices.Reverse(policies)
				}
				for _, policy := range policies {
					if warm > 0 {
						b.StopTimer()
						for oci.IdleEntries(p) < 2*warm {
							time.Sleep(5 * time.Millisecond)
						}
						b.StartTimer()
					}
					ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
					spec := sandbox.Spec{ClientRequestID: "bench"}
					if policy != "" {
						spec.Extensions = map[string]json.RawMessage{"sandboxd.network": json.RawMessage(policy)}
					}
					start := time.Now()
					obs, err := p.Allocate(ctx, ref, spec)
					d := time.Since(start)
					if err != nil || obs.State != sandbox.ObservedReady {
						b.Fatalf("allocate: %+v %v", obs, err)
					}
					if policy == "" {
						plain = append(plain, d)
					} else {
						networked = append(networked, d)
					}
					refs = append(refs, ref)
				}
			}
			b.StopTimer()
			p50 := func(d []time.Duration) float64 {
				slices.Sort(d)
				return float64(d[(len(d)-1)/2].Microseconds()) / 1000
			}
			lo, net := p50(plain), p50(networked)
			b.ReportMetric(lo, "loopback-p50-ms")
			b.ReportMetric(net, "network-p50-ms")
			b.ReportMetric(net/lo, "network-x")
			for _, ref := range refs {
				if err := p.Release(ctx, ref); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// connectScript connects to the test server 200 times and then downloads 256 MiB from it; it prints
// the p50 of a connect in microseconds and the download's MB/s.
const connectScript = `
import socket, sys, time
host = sys.argv[1]
d = []
for _ in range(200):
    t = time.perf_counter(); s = socket.create_connection((host, 80)); d.append(time.perf_counter() - t); s.close()
d.sort()
n = 256 << 20
s = socket.create_connection((host, 80))
t = time.perf_counter()
s.sendall(b"GET /bytes/%d HTTP/1.0\r\nHost: x\r\n\r\n" % n)
got = 0
while True:
    b = s.recv(1 << 20)
    if not b: break
    got += len(b)
el = time.perf_counter() - t
print(d[len(d) // 2] * 1e6, got / el / 1e6)
`

// BenchmarkNetworkConnect measures, from a sandbox with egress allowed and from the host (its floor,
// the same script in the same run), the p50 of a TCP connect to the test's server and the throughput
// of a download from it.
func BenchmarkNetworkConnect(b *testing.B) {
	in := newInternet(b)
	p := netProvider(b, in, testenv.StateDir(b))
	ref := withPolicy(b, p, `{"egress":"allow"}`)
	var sbxConnect, sbxMBps, hostConnect, hostMBps float64
	for i := 0; i < b.N; i++ {
		res := sh(b, p, ref, "python3 -c '"+connectScript+"' "+in.server.String())
		if code(res) != 0 {
			b.Fatalf("in the sandbox: %s", res.Stderr)
		}
		var c, m float64
		if _, err := fmt.Sscan(string(res.Stdout), &c, &m); err != nil {
			b.Fatal(err)
		}
		sbxConnect, sbxMBps = sbxConnect+c, sbxMBps+m
		out, err := exec.Command("/usr/bin/python3", "-c", connectScript, in.server.String()).Output()
		if err != nil {
			b.Fatalf("on the host: %v", err)
		}
		if _, err := fmt.Sscan(string(out), &c, &m); err != nil {
			b.Fatal(err)
		}
		hostConnect, hostMBps = hostConnect+c, hostMBps+m
	}
	n := float64(b.N)
	b.ReportMetric(sbxConnect/n, "sandbox-connect-us")
	b.ReportMetric(hostConnect/n, "host-connect-us")
	b.ReportMetric(sbxConnect/hostConnect, "connect-x")
	b.ReportMetric(sbxMBps/n, "sandbox-MB/s")
	b.ReportMetric(hostMBps/n, "host-MB/s")
	b.ReportMetric(sbxMBps/hostMBps, "throughput-of-host")
}
