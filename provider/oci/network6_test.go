package oci_test

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/oci"
)

// url6 is the curl arguments for http://[a]:port/ (-g: the brackets are no glob).
func url6(a netip.Addr, port int) string {
	return "-g http://" + netip.AddrPortFrom(a, uint16(port)).String() + "/"
}

// connects reports whether a TCP connection from the sandbox to ap is made within 2 s.
func connects(t *testing.T, p *oci.Provider, ref sandbox.Ref, ap netip.AddrPort) bool {
	t.Helper()
	res := sh(t, p, ref, fmt.Sprintf(`python3 -c 'import socket; socket.create_connection(("%s", %d), 2)'`, ap.Addr(), ap.Port()))
	return code(res) == 0
}

// TestNetworkPolicy6: TestNetworkPolicy's cases over IPv6, on a provider with an IPv6 pool: a
// sandbox's policy lets out to IPv6 destinations what it lets out to IPv4 ones, and no rule but one
// naming it opens the host, its link-local addresses, the clouds' IPv6 metadata address, another
// sandbox, or an address that translates to IPv4 (NAT64, IPv4-mapped).
func TestNetworkPolicy6(t *testing.T) {
	in := newInternet(t)
	p := netProvider(t, in, testenv.StateDir(t))
	hostPort := hostServer(t, "host", ":0")
	server, other := url6(in.server6, 80), url6(in.other6, 80)
	metadata := url6(in.metadata6, 80)
	gateway6 := in.pool6().Addr().Next()
	host := append(hostAddrs(t, true, in.pool6()), gateway6)
	if len(host) < 2 {
		t.Fatalf("the host's IPv6 addresses: %v (want the internet's end beside the gateway)", host)
	}

	// Another sandbox, with a network and a server on it, that no sandbox reaches.
	neighbour := withPolicy(t, p, `{"egress":"allow"}`)
	sh(t, p, neighbour, "echo neighbour > /tmp/index.html")
	serveCtx, stopServe := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		p.Exec(serveCtx, neighbour, sandbox.Command{Argv: []string{"python3", "-m", "http.server", "8000", "--bind", "::", "--directory", "/tmp"}, Timeout: 10 * time.Minute})
	}()
	t.Cleanup(func() { stopServe(); <-served })
	n6, ok := oci.NetAddr6(p, neighbour)
	if !ok {
		t.Fatal("a sandbox of a provider with an IPv6 pool has no IPv6 address")
	}
	naddr6 := netip.MustParseAddr(n6)
	if !in.pool6().Contains(naddr6) {
		t.Fatalf("the sandbox's IPv6 address %s is outside the pool %s", naddr6, in.pool6())
	}
	waitFor(t, func() bool {
		body, ok := fetch(t, p, neighbour, url6(naddr6, 8000)+"index.html")
		return ok && strings.TrimSpace(body) == "neighbour"
	})
	// The host's end of a sandbox's link has a link-local address too.
	hostLinkLocal := func(t *testing.T, ref sandbox.Ref) string {
		iface, _ := oci.NetIface(p, ref)
		link, err := netlink.LinkByName(iface)
		if err != nil {
			t.Fatal(err)
		}
		addrs, err := netlink.AddrList(link, netlink.FAMILY_V6)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			if a.IP.IsLinkLocalUnicast() {
				return a.IP.String()
			}
		}
		return ""
	}

	neverReached := func(t *testing.T, ref sandbox.Ref) {
		t.Helper()
		mustNotReach(t, p, ref, metadata)
		mustNotReach(t, p, ref, url6(in.translated, 80))
		for _, a := range host {
			mustNotReach(t, p, ref, url6(a, hostPort))
		}
		// IPv4-mapped: the sandbox's kernel sends IPv4, which the IPv4 rules refuse.
		mustNotReach(t, p, ref, fmt.Sprintf("-g http://[::ffff:%s]/", in.metadata))
		mustNotReach(t, p, ref, fmt.Sprintf("-g http://[::ffff:%s]:%d/", in.hostAddr, hostPort))
		if ll := hostLinkLocal(t, ref); ll != "" {
			mustNotReach(t, p, ref, fmt.Sprintf("-g --interface eth0 http://[%s%%25eth0]:%d/", ll, hostPort))
		}
		if ref != neighbour {
			mustNotReach(t, p, ref, url6(naddr6, 8000))
		}
	}

	t.Run("egress allow", func(t *testing.T) {
		ref := withPolicy(t, p, `{"egress":"allow"}`)
		mustReach(t, p, ref, server, "server6")
		mustReach(t, p, ref, other, "other6")
		mustReach(t, p, ref, "http://"+in.server.String()+"/", "server")
		neverReached(t, ref)
	})
	t.Run("allow list by CIDR", func(t *testing.T) {
		ref := withPolicy(t, p, fmt.Sprintf(`{"allow":["%s"]}`, netip.PrefixFrom(in.server6, 64).Masked()))
		mustReach(t, p, ref, server, "server6")
		mustNotReach(t, p, ref, other)
		mustNotReach(t, p, ref, "http://"+in.server.String()+"/")
		neverReached(t, ref)
	})
	t.Run("allow everything by CIDR opens neither host nor metadata", func(t *testing.T) {
		ref := withPolicy(t, p, `{"allow":["::/0"]}`)
		mustReach(t, p, ref, other, "other6")
		mustNotReach(t, p, ref, "http://"+in.other.String()+"/")
		neverReached(t, ref)
	})
	t.Run("a unique local range opens neither metadata nor another sandbox", func(t *testing.T) {
		ref := withPolicy(t, p, `{"allow":["fc00::/7","fd00::/8"]}`)
		neverReached(t, ref)
	})
	t.Run("deny beats allow", func(t *testing.T) {
		ref := withPolicy(t, p, fmt.Sprintf(`{"egress":"allow","allow":["%s"],"deny":["%s"]}`,
			in.server6, netip.PrefixFrom(in.server6, 64).Masked()))
		mustNotReach(t, p, ref, server)
		mustReach(t, p, ref, other, "other6")
		mustReach(t, p, ref, "http://"+in.server.String()+"/", "server")
		neverReached(t, ref)
	})
	t.Run("a rule naming the metadata address or a host address opens it", func(t *testing.T) {
		ref := withPolicy(t, p, fmt.Sprintf(`{"allow":["%s","%s"]}`, in.metadata6, in.hostAddr6))
		mustReach(t, p, ref, metadata, "metadata6")
		mustReach(t, p, ref, url6(in.hostAddr6, hostPort), "host")
		mustNotReach(t, p, ref, server)
		mustNotReach(t, p, ref, url6(gateway6, hostPort))
	})
	t.Run("no rule opens another sandbox", func(t *testing.T) {
		ref := withPolicy(t, p, fmt.Sprintf(`{"egress":"allow","allow":["%s","%s"]}`, naddr6, in.pool6()))
		mustNotReach(t, p, ref, url6(naddr6, 8000))
	})
	t.Run("DNS goes to the resolver only", func(t *testing.T) {
		ref := withPolicy(t, p, `{"egress":"allow"}`)
		// The test's DNS server answers on the server's IPv4 address; over IPv6 a query to port 53
		// anywhere but the resolver is refused before it leaves (a TCP connection: refused at once).
		ln := in.listen(t, netip.AddrPortFrom(in.server6, 53).String())
		defer ln.Close()
		if connects(t, p, ref, netip.AddrPortFrom(in.server6, 53)) {
			t.Error("connected to port 53 of the internet's server over IPv6")
		}
		if !connects(t, p, ref, netip.AddrPortFrom(in.server6, 80)) {
			t.Error("no connection to port 80 of the internet's server over IPv6: the test shows nothing")
		}
	})
	t.Run("a forged source address goes nowhere", func(t *testing.T) {
		ref := withPolicy(t, p, `{"egress":"allow"}`)
		own, _ := oci.NetAddr6(p, ref)
		// The neighbour's address, and one outside the pool.
		forgedSources(t, p, ref, netip.MustParseAddr(own), netip.AddrPortFrom(in.server6, 80), naddr6, netip.MustParseAddr("2001:db8:ffff::5"))
	})
}

// TestNetworkNames6: rules by name over IPv6. The resolver answers AAAA queries of a sandbox with
// IPv6 and the addresses of an answer for an allowed name are allowed to it as A answers' are; an
// allowed name answering loopback, link-local, the host's, the IPv6 metadata address, a NAT64 or an
// IPv4-mapped address opens none of them. A sandbox of a provider without IPv6 gets no AAAA answer, so
// a rule by name opens no IPv6 there.
func TestNetworkNames6(t *testing.T) {
	in := newInternet(t)
	p := netProvider(t, in, testenv.StateDir(t))
	hostPort := hostServer(t, "host", ":0")
	url := func(name string, port int) string { return fmt.Sprintf("-6 http://%s:%d/", name, port) }

	t.Run("an allowed name is reached over IPv6; nothing else", func(t *testing.T) {
		ref := withPolicy(t, p, `{"allow":["allowed.test","*.wild.test"]}`)
		mustReach(t, p, ref, url("allowed.test", 80), "server6")
		mustReach(t, p, ref, url("sub.wild.test", 80), "server6")
		mustNotReach(t, p, ref, url("other.test", 80))
		mustNotReach(t, p, ref, url6(in.other6, 80))
		if res := sh(t, p, ref, "getent ahostsv6 allowed.test"); code(res) != 0 || !strings.Contains(string(res.Stdout), in.server6.String()) {
			t.Errorf("getent ahostsv6 allowed.test: %d %q %q", code(res), res.Stdout, res.Stderr)
		}
	})
	t.Run("an allowed name answering what no answer opens opens nothing", func(t *testing.T) {
		names := []string{"loop6.test", "ll6.test", "host6.test", "meta6.test", "nat64.test", "mapped.test", "mappedmeta.test"}
		ref := withPolicy(t, p, `{"allow":["`+strings.Join(names, `","`)+`"]}`)
		// Each is answered (a AAAA query to the resolver, whose answer holds the address) and learned.
		for _, name := range names {
			if !answers6(t, p, ref, in.pool().Addr().Next(), name, in.names6()[name+"."]) {
				t.Errorf("%s is not answered %s", name, in.names6()[name+"."])
			}
		}
		for _, name := range names {
			mustNotReach(t, p, ref, url(name, 80))
			mustNotReach(t, p, ref, url(name, hostPort))
		}
		// The IPv4-mapped answers are IPv4 to the sandbox's kernel: the IPv4 rules refuse them.
		mustNotReach(t, p, ref, fmt.Sprintf("-g http://[%s]/", netip.AddrFrom16(in.metadata.As16())))
	})
	t.Run("the resolver answers on the IPv6 gateway", func(t *testing.T) {
		ref := withPolicy(t, p, `{"allow":["allowed.test"]}`)
		gw6 := in.pool6().Addr().Next()
		if !answers6(t, p, ref, gw6, "allowed.test", in.server6) {
			t.Errorf("a AAAA query to %s is not answered", gw6)
		}
		if res := sh(t, p, ref, "cat /etc/resolv.conf"); !strings.Contains(string(res.Stdout), "nameserver "+gw6.String()) {
			t.Errorf("resolv.conf does not name %s: %q", gw6, res.Stdout)
		}
	})
	t.Run("a provider without IPv6 answers no AAAA", func(t *testing.T) {
		p4 := netProvider(t, in, testenv.StateDir(t), func(c *oci.Config) {
			c.Network.Pool6 = netip.Prefix{}
			c.Network.Pool = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 232, in.k, 0}), 24)
		})
		ref := withPolicy(t, p4, `{"allow":["allowed.test"]}`)
		if res := sh(t, p4, ref, "getent ahostsv6 allowed.test"); code(res) == 0 && strings.Contains(string(res.Stdout), in.server6.String()) {
			t.Errorf("an IPv6 answer for a sandbox without IPv6: %q", res.Stdout)
		}
		mustReach(t, p4, ref, "http://allowed.test/", "server")
		mustNotReach(t, p4, ref, url("allowed.test", 80))
	})
}

// answers6 reports whether the resolver at server answers a AAAA query for name of the sandbox ref
// with want among its addresses.
func answers6(t *testing.T, p *oci.Provider, ref sandbox.Ref, server netip.Addr, name string, want netip.Addr) bool {
	t.Helper()
	var q []byte
	for _, label := range strings.Split(name, ".") {
		q = append(append(q, byte(len(label))), label...)
	}
	script := fmt.Sprintf(`python3 -c '
import socket, sys
q = bytes.fromhex("abcd01000001000000000000") + bytes.fromhex("%x") + b"\x00\x00\x1c\x00\x01"
s = socket.socket(socket.AF_INET6 if ":" in "%[2]s" else socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
s.sendto(q, ("%[2]s", 53))
r = s.recv(512)
sys.exit(0 if r[:2] == q[:2] and r[3] & 15 == 0 and bytes.fromhex("%[3]x") in r[len(q):] else 1)
'`, q, server, want.AsSlice())
	res := sh(t, p, ref, script)
	return code(res) == 0
}

// TestNetworkStaleFlows6: a sandbox's IPv6 flows end with it, released or with a provider that died
// and the next one started: the host tracks no flow of its IPv6 address afterwards.
func TestNetworkStaleFlows6(t *testing.T) {
	in := newInternet(t)
	dir := testenv.StateDir(t)
	// keepFlow makes a sandbox of p that keeps a TCP connection to the server over IPv6 and a UDP
	// flow to it, and returns it with its IPv6 address once the host tracks both.
	keepFlow := func(t *testing.T, p *oci.Provider) (sandbox.Ref, netip.Addr) {
		t.Helper()
		ref := withPolicy(t, p, `{"egress":"allow"}`)
		a, _ := oci.NetAddr6(p, ref)
		addr := netip.MustParseAddr(a)
		script := fmt.Sprintf(`import socket, time
u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
u.sendto(b"hello", ("%[1]s", 9999))
c = socket.create_connection(("%[1]s", 80))
while True:
    time.sleep(1)
`, in.server6)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.Exec(ctx, ref, sandbox.Command{Argv: []string{"python3", "-c", script}, Timeout: 10 * time.Minute})
		}()
		t.Cleanup(func() { cancel(); <-done })
		waitFor(t, func() bool { return len(trackedFlows(t, func(b netip.Addr) bool { return b == addr })) >= 2 })
		return ref, addr
	}
	t.Run("released", func(t *testing.T) {
		p := netProvider(t, in, dir)
		ref, addr := keepFlow(t, p)
		if err := p.Release(ctxFor(t), ref); err != nil {
			t.Fatal(err)
		}
		if got := trackedFlows(t, func(b netip.Addr) bool { return b == addr }); len(got) > 0 {
			t.Errorf("flows of the released sandbox's %s are tracked: %q", addr, got)
		}
		releaseAll(t, p)
		if err := oci.CloseNetwork(p); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("across a provider that died", func(t *testing.T) {
		cfg := testConfig(t, dir)
		cfg.Network = in.config()
		dead, err := oci.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if onGVisor(t, dead) {
			dead.Close()
			t.Skip("gVisor's sandboxes have loopback only: netProvider's check of the refusal is all there is")
		}
		ref, addr := keepFlow(t, dead)
		oci.Abandon(dead)
		if out, err := exec.Command("runc", "--root", dir+"/runc", "delete", "-f", oci.Container(dead, ref)).CombinedOutput(); err != nil {
			t.Fatalf("runc delete: %v: %s", err, out)
		}
		next := netProvider(t, in, dir)
		if got := trackedFlows(t, func(b netip.Addr) bool { return b == addr }); len(got) > 0 {
			t.Errorf("after the restart the dead sandbox's IPv6 flows are tracked: %q", got)
		}
		// Nothing of the provider's kept: no table, and the host's IPv6 settings put back.
		checkNoNetwork(t, dir, in, false)
		if err := oci.CloseNetwork(next); err != nil {
			t.Fatal(err)
		}
		checkNoNetwork(t, dir, in, false)
	})
}
