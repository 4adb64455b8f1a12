package oci_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

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

// hostAddrs6 are the host's IPv6 addresses outside loopback and link-local, and those of the given
// prefixes.
func hostAddrs6(t *testing.T, but ...netip.Prefix) []netip.Addr {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Addr
next:
	for _, a := range addrs {
		pr, err := netip.ParsePrefix(a.String())
		if err != nil || !pr.Addr().Is6() || pr.Addr().IsLoopback() || pr.Addr().IsLinkLocalUnicast() {
			continue
		}
		for _, b := range but {
			if b.Contains(pr.Addr()) {
				continue next
			}
		}
		out = append(out, pr.Addr())
	}
	return out
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
	host := append(hostAddrs6(t, in.pool6()), gateway6)
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
		if res := sh(t, p, ref, "ip -6 addr add "+naddr6.String()+"/128 dev eth0"); code(res) == 0 {
			t.Error("the sandbox's root added an address")
		}
		pid, err := oci.InitPid(p, ref)
		if err != nil {
			t.Fatal(err)
		}
		own, _ := oci.NetAddr6(p, ref)
		inNetns(t, pid, func() {
			h, eth0 := eth0Handle(t)
			defer h.Close()
			// The neighbour's address, and one outside the pool.
			outside := "2001:db8:ffff::5"
			for _, a := range []string{naddr6.String(), outside} {
				forged := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(a), Mask: net.CIDRMask(128, 128)}, Flags: unix.IFA_F_NODAD}
				if err := h.AddrAdd(eth0, forged); err != nil {
					t.Fatal(err)
				}
			}
			for _, src := range []string{own, naddr6.String(), outside} {
				d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
				c, err := d.Dial("tcp", netip.AddrPortFrom(in.server6, 80).String())
				if c != nil {
					c.Close()
				}
				if (err == nil) != (src == own) {
					t.Errorf("from %s: connect error %v", src, err)
				}
			}
		})
	})
}
