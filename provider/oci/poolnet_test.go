package oci_test

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/oci"
)

// TestNetworkPoolLinks: warm pool entries kept with their link made ahead (WarmPoolLinks). One made
// before any networked create (no policy expected) reaches nothing, neither through its link nor the
// resolver; one made after has the last create's policy in effect, and reaches what it allows only; a
// sandbox that needs no network never takes one and keeps loopback alone; a sandbox that takes one has
// its own policy in effect once it is ready, whether the entry's was that policy already or another;
// and a provider that closes leaves nothing of them.
func TestNetworkPoolLinks(t *testing.T) {
	in := newInternet(t)
	dir := testenv.StateDir(t)
	// Runs after the provider's own clean-up (release and Close): nothing of the entries is left.
	t.Cleanup(func() { checkNoNetwork(t, dir, in, false) })
	p := netProvider(t, in, dir, func(c *oci.Config) { c.WarmPool, c.Network.WarmPoolLinks = 2, 1 })
	full := func() bool { return oci.IdleEntries(p) == 2 && len(oci.LinkedEntries(p)) == 1 }
	waitFor(t, full)
	first := oci.LinkedEntries(p)[0]

	t.Run("an entry without a policy reaches nothing", func(t *testing.T) {
		entryReachesNothing(t, in, first)
	})

	t.Run("a sandbox that needs no network never takes one", func(t *testing.T) {
		for _, policy := range []string{"", `{"egress":"deny"}`, `{"egress":"deny","deny":["10.0.0.0/8"]}`} {
			waitFor(t, full)
			ref := withPolicy(t, p, policy)
			if c := oci.Container(p, ref); c == first.Name || c == ref.Name() {
				t.Errorf("policy %q: the sandbox runs in %s, want the entry without a link", policy, c)
			}
			if _, ok := oci.NetAddr(p, ref); ok {
				t.Errorf("policy %q: the sandbox has a link", policy)
			}
			if res := sh(t, p, ref, "ls /sys/class/net"); string(res.Stdout) != "lo\n" {
				t.Errorf("policy %q: the sandbox's interfaces: %q, want lo alone", policy, res.Stdout)
			}
			if err := p.Release(ctxFor(t), ref); err != nil {
				t.Fatal(err)
			}
		}
		if le := oci.LinkedEntries(p); len(le) != 1 || le[0].Name != first.Name {
			t.Errorf("the entries with a link: %+v, want %s still idle", le, first.Name)
		}
	})

	t.Run("the sandbox that takes one has its policy at once", func(t *testing.T) {
		server := fmt.Sprintf(`{"allow":["%s/32"]}`, in.server)
		for i, c := range []struct {
			policy     string
			ruled      bool // the entry has a policy in effect: the last create's
			reach, not string
			want       string
		}{
			{server, false, "http://" + in.server.String() + "/", "http://" + in.other.String() + "/", "server"},
			{server, true, "http://" + in.server.String() + "/", "http://" + in.other.String() + "/", "server"},
			// Rules other than those in effect on the entry, and by name: the resolver knows the sandbox at once.
			{`{"allow":["other.test"]}`, true, "http://other.test/", "http://" + in.server.String() + "/", "other"},
			// Over IPv6: the entry's link has it from the start.
			{fmt.Sprintf(`{"allow":["%s"]}`, in.server6), true, url6(in.server6, 80), url6(in.other6, 80), "server6"},
		} {
			waitFor(t, full)
			e := oci.LinkedEntries(p)[0]
			if e.Ruled != c.ruled {
				t.Errorf("case %d: the entry has a policy in effect: %v, want %v", i, e.Ruled, c.ruled)
			}
			if e.Ruled {
				// The last create's policy, before any sandbox owns the entry: what it allows, no more.
				server, other := netip.AddrPortFrom(in.server, 80), netip.AddrPortFrom(in.other, 80)
				if i == 3 { // the last create allowed other.test by name, and nothing is learned yet
					entryDials(t, e, other, false)
					entryDials(t, e, server, false)
				} else {
					entryDials(t, e, server, true)
					entryDials(t, e, other, false)
				}
			}
			ref := withPolicy(t, p, c.policy)
			if got := oci.Container(p, ref); got != e.Name {
				t.Fatalf("case %d: the sandbox runs in %s, want the entry with a link %s", i, got, e.Name)
			}
			if addr, _ := oci.NetAddr(p, ref); addr != e.Addr {
				t.Errorf("case %d: the sandbox's address %s, want its entry's %s", i, addr, e.Addr)
			}
			mustReach(t, p, ref, c.reach, c.want)
			mustNotReach(t, p, ref, c.not)
		}
	})
}

// TestNetworkPoolLinksOutliveTheProvider: a sandbox that took an entry under the policy in effect on
// it (the take records nothing then: the entry's net.json named that policy from the start) keeps its
// policy when its provider dies at once and the next one starts.
func TestNetworkPoolLinksOutliveTheProvider(t *testing.T) {
	in := newInternet(t)
	dir := testenv.StateDir(t)
	cfg := testConfig(t, dir)
	cfg.Network = in.config()
	cfg.WarmPool, cfg.Network.WarmPoolLinks = 1, 1
	dead, err := oci.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if onGVisor(t, dead) {
		dead.Close()
		t.Skip("gVisor's sandboxes have loopback only: netProvider's check of the refusal is all there is")
	}
	policy := `{"allow":["other.test"]}`
	withPolicy(t, dead, policy) // the entries made from now on have its rules in effect
	waitFor(t, func() bool { le := oci.LinkedEntries(dead); return len(le) == 1 && le[0].Ruled })
	e := oci.LinkedEntries(dead)[0]
	ref := withPolicy(t, dead, policy)
	if got := oci.Container(dead, ref); got != e.Name {
		t.Fatalf("the sandbox runs in %s, want the entry under its policy %s", got, e.Name)
	}
	oci.Abandon(dead)

	next := netProvider(t, in, dir)
	mustReach(t, next, ref, "http://other.test/", "other")
	mustNotReach(t, next, ref, "http://"+in.server.String()+"/")
	releaseAll(t, next)
	checkNoNetwork(t, dir, in, true)
}

// entryDials fails unless a TCP connection from the idle entry e to to succeeds exactly when want.
func entryDials(t *testing.T, e oci.LinkedEntry, to netip.AddrPort, want bool) {
	t.Helper()
	inNetns(t, e.Pid, func() {
		c, err := net.DialTimeout("tcp", to.String(), time.Second)
		if err == nil {
			c.Close()
		}
		if (err == nil) != want {
			t.Errorf("the idle entry's connection to %s: %v, want it to succeed: %v", to, err, want)
		}
	})
}

// entryReachesNothing fails unless the idle entry e has its link (eth0, with e's address) and nothing
// it sends through it gets an answer: not the test's server (forwarded), not the gateway (the host), not
// the resolver. The firewall drops what comes from it, so each try waits out its timeout.
func entryReachesNothing(t *testing.T, in *internet, e oci.LinkedEntry) {
	t.Helper()
	gateway := in.pool().Masked().Addr().Next()
	inNetns(t, e.Pid, func() {
		ifc, err := net.InterfaceByName("eth0")
		if err != nil {
			t.Fatalf("the entry's link: %v", err)
		}
		addrs, _ := ifc.Addrs()
		var have, have6 []string
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				have = append(have, ipn.IP.String())
			} else if ok && in.pool6().Contains(netip.MustParseAddr(ipn.IP.String())) {
				have6 = append(have6, ipn.IP.String())
			}
		}
		if !slices.Contains(have, e.Addr) {
			t.Errorf("the entry's eth0 has %q, want %s", have, e.Addr)
		}
		// Its IPv6 side is made ahead too.
		if len(have6) != 1 {
			t.Errorf("the entry's eth0 has IPv6 addresses %q of the pool %s, want one", have6, in.pool6())
		}
		gateway6 := in.pool6().Addr().Next()
		for _, to := range []netip.AddrPort{netip.AddrPortFrom(in.server, 80), netip.AddrPortFrom(gateway, 53),
			netip.AddrPortFrom(in.server6, 80), netip.AddrPortFrom(gateway6, 53)} {
			if c, err := net.DialTimeout("tcp", to.String(), time.Second); err == nil {
				c.Close()
				t.Errorf("the idle entry connected to %s", to)
			}
		}
		m := new(dns.Msg)
		m.SetQuestion("allowed.test.", dns.TypeA)
		cl := &dns.Client{Net: "udp", Timeout: time.Second}
		if r, _, err := cl.Exchange(m, netip.AddrPortFrom(gateway, 53).String()); err == nil {
			t.Errorf("the idle entry's query was answered: %v", r)
		}
	})
}
