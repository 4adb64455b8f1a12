package oci_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/oci"
)

// TestNetworkNames: rules by name, through the daemon's resolver, against the test's DNS server.
func TestNetworkNames(t *testing.T) {
	in := newInternet(t)
	p := netProvider(t, in, testenv.StateDir(t))
	hostPort := hostServer(t, "host", ":0")
	url := func(name string) string { return "http://" + name + "/" }

	t.Run("an allowed name is reached, by name; nothing else", func(t *testing.T) {
		ref := withPolicy(t, p, `{"allow":["allowed.test"]}`)
		mustReach(t, p, ref, url("allowed.test"), "server")
		mustNotReach(t, p, ref, url("other.test"))
		mustNotReach(t, p, ref, url(in.other.String()))
		// A name is its own: not its subdomains.
		mustNotReach(t, p, ref, url("sub.allowed.test"))
	})
	t.Run("a wildcard is the subdomains, not the apex", func(t *testing.T) {
		ref := withPolicy(t, p, `{"allow":["*.wild.test"]}`)
		mustReach(t, p, ref, url("sub.wild.test"), "server")
		mustReach(t, p, ref, url("deep.sub.wild.test"), "server")
		mustNotReach(t, p, ref, url("wild.test"))
		mustNotReach(t, p, ref, url(in.other.String()))
	})
	t.Run("a deny by name beats an allow", func(t *testing.T) {
		ref := withPolicy(t, p, `{"allow":["*.wild.test"],"deny":["denied.wild.test"]}`)
		mustNotReach(t, p, ref, url("denied.wild.test"))
		mustReach(t, p, ref, url("sub.wild.test"), "server")
	})
	t.Run("egress allow resolves every name", func(t *testing.T) {
		ref := withPolicy(t, p, `{"egress":"allow"}`)
		mustReach(t, p, ref, url("allowed.test"), "server")
		mustReach(t, p, ref, url("other.test"), "other")
	})
	t.Run("DNS goes to the daemon's resolver only", func(t *testing.T) {
		ref := withPolicy(t, p, `{"egress":"allow"}`)
		// Straight to the test's DNS server, over UDP and TCP: refused.
		for _, flag := range []string{"", "+tcp"} {
			script := fmt.Sprintf(`python3 -c '
import socket, sys
q = bytes.fromhex("abcd01000001000000000000") + b"\x07allowed\x04test\x00\x00\x01\x00\x01"
tcp = %q == "+tcp"
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM)
s.settimeout(2)
try:
    s.connect(("%s", 53))
    s.send(len(q).to_bytes(2, "big") + q if tcp else q)
    print(len(s.recv(512)))
except OSError as e:
    print(e, file=sys.stderr); sys.exit(1)
'`, flag, in.server)
			if res := sh(t, p, ref, script); code(res) == 0 {
				t.Errorf("a query %s to %s was answered: %s", flag, in.server, res.Stdout)
			}
		}
		// Through the resolver the name resolves.
		if res := sh(t, p, ref, "getent ahostsv4 allowed.test"); code(res) != 0 || !strings.Contains(string(res.Stdout), in.server.String()) {
			t.Errorf("getent ahostsv4 allowed.test: %d %q %q", code(res), res.Stdout, res.Stderr)
		}
	})
	t.Run("an allowed name answering a host or link-local address opens neither", func(t *testing.T) {
		ref := withPolicy(t, p, `{"allow":["rebind.test","host.test"]}`)
		res := sh(t, p, ref, "getent hosts rebind.test host.test")
		if code(res) != 0 || !strings.Contains(string(res.Stdout), in.metadata.String()) {
			t.Fatalf("the names did not resolve: %q %q", res.Stdout, res.Stderr)
		}
		mustNotReach(t, p, ref, url("rebind.test"))
		mustNotReach(t, p, ref, fmt.Sprintf("http://host.test:%d/", hostPort))
	})
	t.Run("the resolver answers sandboxes only, and survives garbage and floods", func(t *testing.T) {
		gw := netip.AddrPortFrom(in.pool().Addr().Next(), 53).String()
		m := new(dns.Msg)
		m.SetQuestion("allowed.test.", dns.TypeA)
		c := &dns.Client{Timeout: 2 * time.Second}
		r, _, err := c.Exchange(m, gw)
		if err != nil || r.Rcode != dns.RcodeRefused {
			t.Errorf("a query from the host: %v %v, want REFUSED", r, err)
		}
		ref := withPolicy(t, p, `{"allow":["allowed.test"]}`)
		garbage := fmt.Sprintf(`python3 -c '
import socket, os
for n in (0, 1, 12, 13, 100, 512, 4000):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(os.urandom(n), ("%s", 53)); s.close()
for n in (0, 1, 2, 70000):
    s = socket.create_connection(("%s", 53), timeout=2)
    try: s.sendall((65535).to_bytes(2, "big") + os.urandom(n))
    except OSError: pass
    s.close()
'`, in.pool().Addr().Next(), in.pool().Addr().Next())
		if res := sh(t, p, ref, garbage); code(res) != 0 {
			t.Fatalf("sending garbage: %s", res.Stderr)
		}
		// A flood of queries: refused past the sandbox's rate, the resolver answers on.
		flood := fmt.Sprintf(`python3 -c '
import socket
q = bytes.fromhex("abcd01000001000000000000") + b"\x07allowed\x04test\x00\x00\x01\x00\x01"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(20000):
    try: s.sendto(q, ("%s", 53))
    except OSError: pass
'`, in.pool().Addr().Next())
		if res := sh(t, p, ref, flood); code(res) != 0 {
			t.Fatalf("flooding: %s", res.Stderr)
		}
		time.Sleep(2 * time.Second) // the rate's burst refills
		mustReach(t, p, ref, url("allowed.test"), "server")
		if _, err := net.DialTimeout("tcp", gw, time.Second); err != nil {
			t.Errorf("the resolver's TCP listener is gone: %v", err)
		}
	})
	t.Run("an answer in flight when the policy changes opens nothing the new one denies", func(t *testing.T) {
		ref := withPolicy(t, p, `{"allow":["slow.test","allowed.test"]}`)
		pid, err := oci.InitPid(p, ref)
		if err != nil {
			t.Fatal(err)
		}
		// ask sends a query for slow.test from the sandbox's address to its resolver and returns the
		// answer; during sets the policy once the upstream has the query, before it answers.
		ask := func(during string) (*dns.Msg, bool) {
			t.Helper()
			type result struct {
				m   *dns.Msg
				err error
			}
			var c net.Conn
			inNetns(t, pid, func() {
				if c, err = net.Dial("udp4", netip.AddrPortFrom(in.pool().Addr().Next(), 53).String()); err != nil {
					t.Fatal(err)
				}
			})
			defer c.Close()
			select { // a query told before
			case <-in.slowAsked:
			default:
			}
			answer := make(chan result, 1)
			go func() {
				co := &dns.Conn{Conn: c}
				co.SetDeadline(time.Now().Add(10 * time.Second))
				m := new(dns.Msg)
				m.SetQuestion("slow.test.", dns.TypeA)
				if err := co.WriteMsg(m); err != nil {
					answer <- result{nil, err}
					return
				}
				r, err := co.ReadMsg()
				answer <- result{r, err}
			}()
			select {
			case <-in.slowAsked:
			case <-time.After(5 * time.Second):
				t.Fatal("the query did not reach the upstream")
			}
			if during != "" {
				if _, err := p.SetNetworkPolicy(ctxFor(t), ref, sandbox.Spec{}, json.RawMessage(during)); err != nil {
					t.Fatal(err)
				}
			}
			released := false
			select {
			case in.slowGo <- struct{}{}:
				released = true
			case <-time.After(2 * time.Second):
			}
			r := <-answer
			if r.err != nil {
				t.Fatalf("the query: %v", r.err)
			}
			return r.m, released
		}
		// Without a change the answer opens its address.
		if r, _ := ask(""); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("slow.test: %v", r)
		}
		mustReach(t, p, ref, url(in.other.String()), "other")
		// The policy replaced while the upstream is still to answer: the answer learned under the old
		// policy opens nothing under the new one. (An upstream that answered before the change proves
		// nothing: the query is asked again.)
		for i := 0; ; i++ {
			r, released := ask(`{"allow":["allowed.test"]}`)
			if !released && i < 3 {
				if _, err := p.SetNetworkPolicy(ctxFor(t), ref, sandbox.Spec{}, json.RawMessage(`{"allow":["slow.test","allowed.test"]}`)); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if !released {
				t.Fatal("the upstream never answered after the policy change")
			}
			if r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0 {
				t.Errorf("an answer asked under the old policy was given under the new one: %v", r)
			}
			break
		}
		mustNotReach(t, p, ref, url(in.other.String()))
		mustNotReach(t, p, ref, url("slow.test"))
		mustReach(t, p, ref, url("allowed.test"), "server")
	})
}
