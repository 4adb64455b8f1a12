package oci_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/provider/oci"
)

// netProvider is a provider whose sandboxes' network uses in as the world outside. On gVisor, whose
// sandboxes run on loopback only, it checks that a policy letting anything out is refused (422, never a
// silent deny) and skips the caller's test, which has nothing more to show there.
func netProvider(t testing.TB, in *internet, dir string, mutate ...func(*oci.Config)) *oci.Provider {
	t.Helper()
	cfg := testConfig(t, dir)
	cfg.Network = in.config()
	for _, m := range mutate {
		m(&cfg)
	}
	p := newProviderWith(t, cfg)
	if onGVisor(t, p) {
		for _, policy := range []string{`{"egress":"allow"}`, `{"allow":["10.0.0.0/8"]}`, `{"allow":["example.com"]}`} {
			spec := sandbox.Spec{Extensions: map[string]json.RawMessage{"sandboxd.network": json.RawMessage(policy)}}
			if err := p.ValidateSpec(spec); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
				t.Errorf("%s on gVisor: %v, want ErrUnsupportedCapability", policy, err)
			}
		}
		if m, _ := p.Manifest(context.Background()); m.Capabilities.NetworkPolicy {
			t.Error("gVisor's manifest says networkPolicy")
		}
		t.Skip("gVisor's sandboxes have loopback only: its refusal of a network policy is all there is to check")
	}
	return p
}

// withPolicy allocates a sandbox whose spec holds policy (nil: none) and fails unless it is ready.
func withPolicy(t testing.TB, p *oci.Provider, policy string) sandbox.Ref {
	t.Helper()
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	spec := sandbox.Spec{ClientRequestID: "t"}
	if policy != "" {
		spec.Extensions = map[string]json.RawMessage{"sandboxd.network": json.RawMessage(policy)}
	}
	obs, err := p.Allocate(ctxFor(t), ref, spec)
	if err != nil {
		t.Fatalf("allocate with %s: %v", policy, err)
	}
	if obs.State != sandbox.ObservedReady {
		t.Fatalf("allocate with %s: %+v", policy, obs)
	}
	return ref
}

// fetch asks for url from inside the sandbox and returns the body, or false when it could not connect.
func fetch(t *testing.T, p *oci.Provider, ref sandbox.Ref, url string) (string, bool) {
	t.Helper()
	res := sh(t, p, ref, "curl -sS --max-time 2 "+url)
	if code(res) != 0 {
		return string(res.Stderr), false
	}
	return string(res.Stdout), true
}

func mustReach(t *testing.T, p *oci.Provider, ref sandbox.Ref, url, want string) {
	t.Helper()
	body, ok := fetch(t, p, ref, url)
	if !ok || body != want {
		t.Errorf("%s: got %q (connected %v), want %q", url, body, ok, want)
	}
}

func mustNotReach(t *testing.T, p *oci.Provider, ref sandbox.Ref, url string) {
	t.Helper()
	if body, ok := fetch(t, p, ref, url); ok {
		t.Errorf("%s reached from the sandbox: %q", url, body)
	}
}

// hostAddrs are the host's IPv4 addresses (IPv6 ones with v6, link-local left out) outside loopback
// and the given prefixes.
func hostAddrs(t *testing.T, v6 bool, but ...netip.Prefix) []netip.Addr {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Addr
next:
	for _, a := range addrs {
		pr, err := netip.ParsePrefix(a.String())
		if err != nil || pr.Addr().Is6() != v6 || pr.Addr().IsLoopback() || v6 && pr.Addr().IsLinkLocalUnicast() {
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

func TestNetworkPolicy(t *testing.T) {
	in := newInternet(t)
	p := netProvider(t, in, testenv.StateDir(t))
	// A listener of the host's on every address and one on its loopback only, as the daemon's would be.
	hostPort := hostServer(t, "host", ":0")
	loopPort := hostServer(t, "loopback", "127.0.0.1:0")
	server := "http://" + in.server.String() + "/"
	other := "http://" + in.other.String() + "/"
	metadata := "http://" + in.metadata.String() + "/"

	// The host's side of every link and address, which no policy without a rule naming it reaches.
	gateway := in.pool().Addr().Next()
	host := append(hostAddrs(t, false, in.pool()), gateway)
	var neighbour sandbox.Ref
	neverReached := func(t *testing.T, ref sandbox.Ref) {
		t.Helper()
		mustNotReach(t, p, ref, metadata)
		mustNotReach(t, p, ref, fmt.Sprintf("http://127.0.0.1:%d/", loopPort))
		mustNotReach(t, p, ref, fmt.Sprintf("http://127.0.0.1:%d/", hostPort))
		for _, a := range host {
			mustNotReach(t, p, ref, fmt.Sprintf("http://%s:%d/", a, hostPort))
		}
		if addr, ok := oci.NetAddr(p, neighbour); ok && neighbour != ref {
			mustNotReach(t, p, ref, "http://"+addr+":8000/")
		}
	}

	// Another sandbox, with a network and a server on it, that no sandbox reaches.
	neighbour = withPolicy(t, p, `{"egress":"allow"}`)
	sh(t, p, neighbour, "echo neighbour > /tmp/index.html")
	serveCtx, stopServe := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		p.Exec(serveCtx, neighbour, sandbox.Command{Argv: []string{"python3", "-m", "http.server", "8000", "--directory", "/tmp"}, Timeout: 10 * time.Minute})
	}()
	t.Cleanup(func() { stopServe(); <-served })
	naddr, _ := oci.NetAddr(p, neighbour)
	waitFor(t, func() bool {
		body, ok := fetch(t, p, neighbour, "http://"+naddr+":8000/index.html")
		return ok && strings.TrimSpace(body) == "neighbour"
	})

	t.Run("default deny: loopback only", func(t *testing.T) {
		ref := withPolicy(t, p, "")
		if _, ok := oci.NetAddr(p, ref); ok {
			t.Error("a sandbox without a policy got a network")
		}
		res := sh(t, p, ref, "ls /sys/class/net")
		if got := strings.Fields(string(res.Stdout)); len(got) != 1 || got[0] != "lo" {
			t.Errorf("interfaces %q, want lo alone", got)
		}
		mustNotReach(t, p, ref, server)
		neverReached(t, ref)
	})
	t.Run("explicit deny with rules", func(t *testing.T) {
		ref := withPolicy(t, p, `{"egress":"deny","deny":["198.18.0.0/15"]}`)
		if _, ok := oci.NetAddr(p, ref); ok {
			t.Error("a sandbox that allows nothing got a network")
		}
		mustNotReach(t, p, ref, server)
	})
	t.Run("egress allow", func(t *testing.T) {
		ref := withPolicy(t, p, `{"egress":"allow"}`)
		mustReach(t, p, ref, server, "server")
		mustReach(t, p, ref, other, "other")
		neverReached(t, ref)
	})
	t.Run("allow list by CIDR", func(t *testing.T) {
		ref := withPolicy(t, p, fmt.Sprintf(`{"allow":["%s"]}`, netip.PrefixFrom(in.server, 24).Masked()))
		mustReach(t, p, ref, server, "server")
		mustNotReach(t, p, ref, other)
		neverReached(t, ref)
	})
	t.Run("allow everything by CIDR opens neither host nor metadata", func(t *testing.T) {
		ref := withPolicy(t, p, `{"allow":["0.0.0.0/0"]}`)
		mustReach(t, p, ref, other, "other")
		neverReached(t, ref)
	})
	t.Run("deny beats allow", func(t *testing.T) {
		ref := withPolicy(t, p, fmt.Sprintf(`{"egress":"allow","allow":["%s/32"],"deny":["%s"]}`,
			in.server, netip.PrefixFrom(in.server, 24).Masked()))
		mustNotReach(t, p, ref, server)
		mustReach(t, p, ref, other, "other")
		neverReached(t, ref)
	})
	t.Run("a rule naming the metadata address or a host address opens it", func(t *testing.T) {
		ref := withPolicy(t, p, fmt.Sprintf(`{"allow":["169.254.169.254/32","%s/32"]}`, in.hostAddr))
		mustReach(t, p, ref, metadata, "metadata")
		mustReach(t, p, ref, fmt.Sprintf("http://%s:%d/", in.hostAddr, hostPort), "host")
		mustNotReach(t, p, ref, server)
		mustNotReach(t, p, ref, fmt.Sprintf("http://%s:%d/", gateway, hostPort))
	})
	t.Run("no rule opens another sandbox", func(t *testing.T) {
		ref := withPolicy(t, p, fmt.Sprintf(`{"egress":"allow","allow":["%s/32","%s"]}`, naddr, in.pool()))
		mustNotReach(t, p, ref, "http://"+naddr+":8000/")
	})
	t.Run("a forged source address goes nowhere", func(t *testing.T) {
		ref := withPolicy(t, p, `{"egress":"allow"}`)
		own, _ := oci.NetAddr(p, ref)
		forgedSources(t, p, ref, netip.MustParseAddr(own), netip.AddrPortFrom(in.server, 80), netip.MustParseAddr(naddr))
	})
	t.Run("malformed policies", func(t *testing.T) {
		for _, bad := range []string{`{"egress":"maybe"}`, `{"allow":["10.0.0.1/8"]}`, `{"allow":["2001:db8::1/64"]}`,
			`{"allow":[""]}`, `{"deny":["Example.COM"]}`, `{"allow":"10.0.0.0/8"}`, `{"other":1}`, `[]`} {
			spec := sandbox.Spec{Extensions: map[string]json.RawMessage{"sandboxd.network": json.RawMessage(bad)}}
			if err := p.ValidateSpec(spec); !errors.Is(err, sandbox.ErrInvalidRequest) {
				t.Errorf("%s: %v, want ErrInvalidRequest", bad, err)
			}
		}
	})
}

// forgedSources shows that the sandbox ref, whose address is own, reaches server from own alone. Its
// root may not change its namespace's addresses (no CAP_NET_ADMIN); were it to, the host drops what
// does not come from the address it was given: the test adds each of forged inside the sandbox's
// namespace (without duplicate detection) and connects from it.
func forgedSources(t *testing.T, p *oci.Provider, ref sandbox.Ref, own netip.Addr, server netip.AddrPort, forged ...netip.Addr) {
	t.Helper()
	if res := sh(t, p, ref, fmt.Sprintf("ip addr add %s dev eth0", netip.PrefixFrom(forged[0], forged[0].BitLen()))); code(res) == 0 {
		t.Error("the sandbox's root added an address")
	}
	pid, err := oci.InitPid(p, ref)
	if err != nil {
		t.Fatal(err)
	}
	inNetns(t, pid, func() {
		h, eth0 := eth0Handle(t)
		defer h.Close()
		for _, a := range forged {
			n := a.BitLen()
			if err := h.AddrAdd(eth0, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(n, n)}, Flags: unix.IFA_F_NODAD}); err != nil {
				t.Fatal(err)
			}
		}
		for _, src := range append([]netip.Addr{own}, forged...) {
			d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: src.AsSlice()}}
			c, err := d.Dial("tcp", server.String())
			if c != nil {
				c.Close()
			}
			if (err == nil) != (src == own) {
				t.Errorf("from %s: connect error %v", src, err)
			}
		}
	})
}

// TestNetworkWarmPool: a sandbox that takes a warm pool entry gets its network and policy then.
func TestNetworkWarmPool(t *testing.T) {
	in := newInternet(t)
	p := netProvider(t, in, testenv.StateDir(t), func(c *oci.Config) { c.WarmPool = 1 })
	waitFor(t, func() bool { return oci.IdleEntries(p) == 1 })
	ref := withPolicy(t, p, fmt.Sprintf(`{"allow":["%s/32"]}`, in.server))
	if oci.Container(p, ref) == ref.Name() {
		t.Fatal("the sandbox did not take the pool's entry")
	}
	mustReach(t, p, ref, "http://"+in.server.String()+"/", "server")
	mustNotReach(t, p, ref, "http://"+in.other.String()+"/")
}

// TestNetworkLeaks: networked sandboxes made and released, and a provider that dies with some running
// and warm pool entries with their links idle, leave nothing behind once the next provider has started and released what was left: no host
// interface, no address of the pool, no route to it, no rule, no tracked flow. (100 cycles and a
// daemon killed with SIGKILL: cmd/sandboxd's TestOCINetworkAcrossDaemonSIGKILL.)
func TestNetworkLeaks(t *testing.T) {
	in := newInternet(t)
	dir := testenv.StateDir(t)
	forwarding6 := ipv6Forwarding(t)
	p := netProvider(t, in, dir)
	for i := range 25 {
		ref := withPolicy(t, p, `{"egress":"allow"}`)
		if i%5 == 0 {
			mustReach(t, p, ref, "http://"+in.server.String()+"/", "server")
			mustReach(t, p, ref, url6(in.server6, 80), "server6")
		}
		if err := p.Release(ctxFor(t), ref); err != nil {
			t.Fatal(err)
		}
	}
	checkNoNetwork(t, dir, in, true)

	// A provider that dies with three networked sandboxes running; two of them die with it. Its warm
	// pool's idle entries have their links, with the policy its sandboxes asked for in effect.
	cfg := testConfig(t, dir)
	cfg.Network = in.config()
	cfg.WarmPool, cfg.Network.WarmPoolLinks = 2, 2
	dead, err := oci.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var refs []sandbox.Ref
	for range 3 {
		ref := withPolicy(t, dead, `{"egress":"allow"}`)
		mustReach(t, dead, ref, "http://"+in.server.String()+"/", "server")
		mustReach(t, dead, ref, url6(in.server6, 80), "server6")
		refs = append(refs, ref)
	}
	survivor := refs[0]
	waitFor(t, func() bool {
		le := oci.LinkedEntries(dead)
		return len(le) == 2 && le[0].Ruled && le[1].Ruled
	})
	oci.Abandon(dead)
	for _, ref := range refs[1:] {
		if out, err := exec.Command("runc", "--root", dir+"/runc", "delete", "-f", oci.Container(dead, ref)).CombinedOutput(); err != nil {
			t.Fatalf("runc delete: %v: %s", err, out)
		}
	}
	// And an interface of the provider's left half-made.
	stray := oci.NetPrefix(dir) + "dead"
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: stray}, PeerName: stray + "p"}); err != nil {
		t.Fatal(err)
	}

	next := netProvider(t, in, dir)
	iface, _ := oci.NetIface(next, survivor)
	kept, _ := oci.NetAddr(next, survivor)
	kept6, _ := oci.NetAddr6(next, survivor)
	if got := trackedFlows(t, func(a netip.Addr) bool {
		return (sandboxAddr(in.pool(), a) || sandboxAddr(in.pool6(), a)) && a.String() != kept && a.String() != kept6
	}); len(got) > 0 {
		t.Errorf("after the restart the dead sandboxes' flows are tracked: %q", got)
	}
	if got := links(t, oci.NetPrefix(dir)); len(got) != 1 || got[0] != iface {
		t.Errorf("after the restart the provider's interfaces are %q, want the survivor's %q", got, iface)
	}
	if got := tableSandboxes(t, dir); len(got) != 1 || got[0] != "fwd-"+iface {
		t.Errorf("after the restart the table's sandbox chains are %q, want the survivor's", got)
	}
	mustReach(t, next, survivor, "http://"+in.server.String()+"/", "server")
	mustReach(t, next, survivor, url6(in.server6, 80), "server6")
	releaseAll(t, next)
	checkNoNetwork(t, dir, in, true)
	if err := oci.CloseNetwork(next); err != nil {
		t.Fatal(err)
	}
	checkNoNetwork(t, dir, in, false)
	if got := ipv6Forwarding(t); got != forwarding6 {
		t.Errorf("the host's IPv6 forwarding is %s, was %s before the providers", got, forwarding6)
	}
}

// ipv6Forwarding is the host's net.ipv6.conf.all.forwarding.
func ipv6Forwarding(t testing.TB) string {
	t.Helper()
	raw, err := os.ReadFile("/proc/sys/net/ipv6/conf/all/forwarding")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(raw))
}

// checkNoNetwork fails when anything of the provider on dir, whose world outside is in, is left on
// the host: an interface of its prefix, an address or route of its pools, a tracked flow of one of
// their addresses, a sandbox's chain (or, without table, the table itself, and the record of the
// host's IPv6 settings it changed).
func checkNoNetwork(t *testing.T, dir string, in *internet, table bool) {
	t.Helper()
	pool, pool6 := in.pool(), in.pool6()
	if got := links(t, oci.NetPrefix(dir)); len(got) > 0 {
		t.Errorf("interfaces left: %q", got)
	}
	routes, err := netlink.RouteList(nil, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		if a, ok := netip.AddrFromSlice(r.Dst.IP); ok && (pool.Contains(a.Unmap()) || pool6.Contains(a)) {
			t.Errorf("route left: %s", r)
		}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if pr, err := netip.ParsePrefix(a.String()); err == nil && (pool.Contains(pr.Addr()) || pool6.Contains(pr.Addr())) {
			t.Errorf("address left: %s", a)
		}
	}
	if got := trackedFlows(t, func(a netip.Addr) bool { return sandboxAddr(pool, a) || sandboxAddr(pool6, a) }); len(got) > 0 {
		t.Errorf("tracked flows left: %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "net-ipv6")); !table && !os.IsNotExist(err) {
		t.Errorf("the record of the host's IPv6 settings is left: %v", err)
	}
	conn, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tb := range tables {
		found = found || tb.Name == oci.NetTable(dir)
	}
	if found != table {
		t.Errorf("the provider's table there: %v, want %v", found, table)
	}
	if table {
		if got := tableSandboxes(t, dir); len(got) > 0 {
			t.Errorf("sandbox chains left: %q", got)
		}
	}
}

// tableSandboxes lists the per-sandbox forward chains of the provider's table.
func tableSandboxes(t *testing.T, dir string) []string {
	t.Helper()
	conn, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	chains, err := conn.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range chains {
		if c.Table.Name == oci.NetTable(dir) && strings.HasPrefix(c.Name, "fwd-") {
			out = append(out, c.Name)
		}
	}
	return out
}

func links(t *testing.T, prefix string) []string {
	t.Helper()
	all, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range all {
		if strings.HasPrefix(l.Attrs().Name, prefix) {
			out = append(out, l.Attrs().Name)
		}
	}
	return out
}

// TestNetworkUsage: a sandbox with a network counts what crosses its link, in from the sandbox's side
// (what the host's end sent) and out; one on loopback only says nothing of a network.
func TestNetworkUsage(t *testing.T) {
	in := newInternet(t)
	p := netProvider(t, in, testenv.StateDir(t))
	ref := withPolicy(t, p, `{"egress":"allow"}`)
	before, err := p.Usage(ctxFor(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	if before.NetworkRxBytes == nil || before.NetworkTxBytes == nil {
		t.Fatalf("no network figures for a sandbox with a network: %+v", before)
	}
	const down, up = 4 << 20, 2 << 20
	server := "http://" + in.server.String()
	script := fmt.Sprintf(`curl -sS --max-time 20 -o /dev/null %s/bytes/%d &&
		head -c %d /dev/zero | curl -sS --max-time 20 --data-binary @- %s/sink`, server, down, up, server)
	if res := sh(t, p, ref, script); code(res) != 0 || strings.TrimSpace(string(res.Stdout)) != fmt.Sprint(up) {
		t.Fatalf("transfer: %+v", res)
	}
	after, err := p.Usage(ctxFor(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	if got := *after.NetworkRxBytes - *before.NetworkRxBytes; got < down {
		t.Errorf("%d bytes in after a %d-byte download", got, down)
	}
	if got := *after.NetworkTxBytes - *before.NetworkTxBytes; got < up {
		t.Errorf("%d bytes out after a %d-byte upload", got, up)
	}
	// Inbound is mostly the download, not the upload's acknowledgements: the sides are not swapped.
	if *after.NetworkRxBytes-*before.NetworkRxBytes > 2*down+up {
		t.Errorf("in %d bytes, out %d: more in than was sent", *after.NetworkRxBytes-*before.NetworkRxBytes, *after.NetworkTxBytes-*before.NetworkTxBytes)
	}

	local := withPolicy(t, p, "")
	u, err := p.Usage(ctxFor(t), local)
	if err != nil {
		t.Fatal(err)
	}
	if u.NetworkRxBytes != nil || u.NetworkTxBytes != nil {
		t.Errorf("network figures for a sandbox on loopback only: %+v", u)
	}
}

// sandboxAddr reports whether a is an address of pool a sandbox may have (not its gateway).
func sandboxAddr(pool netip.Prefix, a netip.Addr) bool {
	return pool.Contains(a) && a != pool.Addr().Next()
}

// trackedFlows are the host's connection tracking entries (IPv4 and IPv6) one of whose addresses match
// reports.
func trackedFlows(t testing.TB, match func(netip.Addr) bool) []string {
	t.Helper()
	var all []*netlink.ConntrackFlow
	for _, fam := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		var flows []*netlink.ConntrackFlow
		var err error
		for range 3 {
			if flows, err = netlink.ConntrackTableList(netlink.ConntrackTable, fam); !errors.Is(err, netlink.ErrDumpInterrupted) {
				break
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, flows...)
	}
	var out []string
	for _, f := range all {
		for _, ip := range []net.IP{f.Forward.SrcIP, f.Forward.DstIP, f.Reverse.SrcIP, f.Reverse.DstIP} {
			if a, ok := netip.AddrFromSlice(ip); ok && match(a.Unmap()) {
				out = append(out, f.String())
				break
			}
		}
	}
	return out
}

// TestNetworkStaleFlows: a sandbox's flows end with it. A sandbox keeps a UDP flow and a TCP
// connection to a server going; once it is released, or its provider died and the next one started,
// the host tracks no flow of its address, and a sandbox given the same address afterwards neither
// receives the server's packets nor sends on the old flow, which its own policy does not allow.
func TestNetworkStaleFlows(t *testing.T) {
	in := newInternet(t)
	tk := in.newTicker(t)
	dir := testenv.StateDir(t)
	p := netProvider(t, in, dir)
	flowsOf := func(t *testing.T, addr string) []string {
		a := netip.MustParseAddr(addr)
		return trackedFlows(t, func(b netip.Addr) bool { return a == b })
	}
	// keepFlows makes a sandbox that keeps a UDP flow (from its port) and a TCP connection to the
	// ticker going, and returns it with its address once the host tracks both.
	keepFlows := func(t *testing.T, p *oci.Provider, port int) (sandbox.Ref, string) {
		t.Helper()
		ref := withPolicy(t, p, `{"egress":"allow"}`)
		addr, _ := oci.NetAddr(p, ref)
		_, peers, conns := tk.counts()
		script := fmt.Sprintf(`import socket
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("0.0.0.0", %[4]d))
u.sendto(b"hello", ("%[1]s", %[2]d))
c = socket.create_connection(("%[1]s", %[3]d))
while True:
    u.recv(64); c.recv(64)
`, in.server, tk.udp.Port(), tk.tcp.Port(), port)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.Exec(ctx, ref, sandbox.Command{Argv: []string{"python3", "-c", script}, Timeout: 10 * time.Minute})
		}()
		t.Cleanup(func() { cancel(); <-done })
		waitFor(t, func() bool {
			_, p2, c2 := tk.counts()
			return p2 > peers && c2 > conns
		})
		waitFor(t, func() bool { return len(flowsOf(t, addr)) >= 2 })
		return ref, addr
	}
	// reuse gives addr to a new sandbox of p, whose policy allows another server only, and shows that
	// nothing of the old flows reaches it or goes out from it.
	reuse := func(t *testing.T, p *oci.Provider, addr string, port int) {
		t.Helper()
		if got := flowsOf(t, addr); len(got) > 0 {
			t.Errorf("flows of the released sandbox's %s are tracked: %q", addr, got)
		}
		oci.SetNextAddr(p, addr)
		ref := withPolicy(t, p, fmt.Sprintf(`{"allow":["%s/32"]}`, in.other))
		defer p.Release(ctxFor(t), ref)
		if got, _ := oci.NetAddr(p, ref); got != addr {
			t.Fatalf("the new sandbox has %s, want %s", got, addr)
		}
		pid, err := oci.InitPid(p, ref)
		if err != nil {
			t.Fatal(err)
		}
		sent, _, _ := tk.counts()
		var received []string
		inNetns(t, pid, func() {
			// Every IPv4 packet that comes in on the sandbox's eth0 ...
			fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_IP)))
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			eth0, err := net.InterfaceByName("eth0")
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: eth0.Index}); err != nil {
				t.Fatal(err)
			}
			if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200_000}); err != nil {
				t.Fatal(err)
			}
			// ... while the old UDP flow's datagrams are sent again, from its address and port.
			u, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(addr), Port: port})
			if err != nil {
				t.Fatal(err)
			}
			defer u.Close()
			buf := make([]byte, 2048)
			for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
				u.WriteToUDPAddrPort([]byte("stale"), tk.udp)
				n, _, err := unix.Recvfrom(fd, buf, 0)
				if err != nil || n < 20 {
					continue
				}
				proto, src := buf[9], netip.AddrFrom4([4]byte(buf[12:16]))
				if src == in.server && (proto == unix.IPPROTO_UDP || proto == unix.IPPROTO_TCP) {
					received = append(received, fmt.Sprintf("proto %d, %d bytes", proto, n))
				}
			}
		})
		if len(received) > 0 {
			t.Errorf("the sandbox given %s again received %d packets of the server: %q", addr, len(received), received)
		}
		if now, _, _ := tk.counts(); now != sent {
			t.Errorf("the server received %d datagrams the sandbox given %s again sent on the old flow", now-sent, addr)
		}
	}

	t.Run("released", func(t *testing.T) {
		ref, addr := keepFlows(t, p, 40000)
		if err := p.Release(ctxFor(t), ref); err != nil {
			t.Fatal(err)
		}
		reuse(t, p, addr, 40000)
	})
	t.Run("across a provider that died", func(t *testing.T) {
		cfg := testConfig(t, dir)
		cfg.Network = in.config()
		dead, err := oci.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ref, addr := keepFlows(t, dead, 40001)
		oci.Abandon(dead)
		if out, err := exec.Command("runc", "--root", dir+"/runc", "delete", "-f", oci.Container(dead, ref)).CombinedOutput(); err != nil {
			t.Fatalf("runc delete: %v: %s", err, out)
		}
		next := netProvider(t, in, dir)
		reuse(t, next, addr, 40001)
	})
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestNetworkUplinkForwarding: a provider turns IPv4 forwarding on on its uplinks at the first sandbox
// with a network and, when it closes with none, off again where it was off: also when the provider
// that turned it on died with its sandbox running and the next one released it. An uplink where it
// was on already stays on.
func TestNetworkUplinkForwarding(t *testing.T) {
	in := newInternet(t)
	var rnd [3]byte
	rand.Read(rnd[:])
	on := "to" + hex.EncodeToString(rnd[:]) // a second uplink of the test's, going nowhere
	ipCmd(t, "link", "add", on, "type", "veth", "peer", "name", on+"p")
	t.Cleanup(func() { exec.Command("ip", "link", "del", on).Run() })
	forwarding := func(iface string) string {
		t.Helper()
		raw, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + iface + "/forwarding")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(raw))
	}
	for iface, v := range map[string]string{in.uplink: "0", on: "1"} {
		if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+iface+"/forwarding", []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when, uplink string) {
		t.Helper()
		if got := forwarding(in.uplink); got != uplink {
			t.Errorf("%s: forwarding on the uplink %s, want %s", when, got, uplink)
		}
		if got := forwarding(on); got != "1" {
			t.Errorf("%s: forwarding on the uplink where it was on is %s", when, got)
		}
	}
	server := "http://" + in.server.String() + "/"
	dir := testenv.StateDir(t)
	uplinks := func(c *oci.Config) { c.Network.Uplinks = []string{in.uplink, on} }
	p := netProvider(t, in, dir, uplinks)
	check("before a sandbox has a network", "0")
	ref := withPolicy(t, p, `{"egress":"allow"}`)
	mustReach(t, p, ref, server, "server")
	check("with a sandbox on a network", "1")
	releaseAll(t, p)
	check("the provider still open", "1")
	if err := oci.CloseNetwork(p); err != nil {
		t.Fatal(err)
	}
	check("the provider closed", "0")

	cfg := testConfig(t, dir)
	cfg.Network = in.config()
	uplinks(&cfg)
	dead, err := oci.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ref = withPolicy(t, dead, `{"egress":"allow"}`)
	check("with a sandbox of the provider that dies", "1")
	oci.Abandon(dead)
	next := netProvider(t, in, dir, uplinks)
	mustReach(t, next, ref, server, "server")
	releaseAll(t, next)
	if err := oci.CloseNetwork(next); err != nil {
		t.Fatal(err)
	}
	check("the next provider closed", "0")
}

// TestNetworkIPv6: what a sandbox under egress allow sends over IPv6 from its link (from a link-local
// address, to every node of the link) arrives at the host's end of the link and goes no further: a
// listener of the host on the port hears nothing (its chains drop a source that is not its own
// address, link-local ones included).
func TestNetworkIPv6(t *testing.T) {
	in := newInternet(t)
	p := netProvider(t, in, testenv.StateDir(t))
	listener, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6unspecified})
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	port := listener.LocalAddr().(*net.UDPAddr).Port
	heard := make(chan string, 100)
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := listener.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if string(buf[:n]) == "from the sandbox" {
				heard <- from.String()
			}
		}
	}()
	ref := withPolicy(t, p, `{"egress":"allow"}`)
	iface, _ := oci.NetIface(p, ref)
	host, err := net.InterfaceByName(iface)
	if err != nil {
		t.Fatal(err)
	}
	// What arrives at the host's end: every IPv6 packet.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_IPV6)))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IPV6), Ifindex: host.Index}); err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200_000}); err != nil {
		t.Fatal(err)
	}
	// The sandbox's own link-local address stays tentative and cannot be sent from: the test gives
	// eth0 one without duplicate detection, as a sandbox able to would, and sends from it.
	pid, err := oci.InitPid(p, ref)
	if err != nil {
		t.Fatal(err)
	}
	inNetns(t, pid, func() { sendAllNodes(t, "fe80::5a", port) })
	arrived := 0
	buf := make([]byte, 2048)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			break
		}
		// An IPv6 header (40 bytes), UDP next, to the listener's port.
		if n >= 48 && buf[6] == unix.IPPROTO_UDP && int(buf[42])<<8|int(buf[43]) == port {
			arrived++
		}
	}
	if arrived == 0 {
		t.Fatal("no datagram of the sandbox's arrived at the host's end of its link: the test shows nothing")
	}
	select {
	case from := <-heard:
		t.Errorf("the host heard the sandbox over IPv6, from %s", from)
	case <-time.After(time.Second):
	}
	// The listener hears the same from a link of the host's where IPv6 is on: the test's internet.
	target, err := netns.GetFromName(in.ns)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	inNamespace(t, target, func() { sendAllNodes(t, "fe80::5b", port) })
	select {
	case <-heard:
	case <-time.After(5 * time.Second):
		t.Error("the host's listener heard nothing from a link where IPv6 is on: the test shows nothing")
	}
}

// sendAllNodes gives eth0 of the namespace the calling thread is in the link-local address addr,
// without duplicate detection (a tentative address cannot be sent from), and sends from it to every
// node of the link on port.
func sendAllNodes(t testing.TB, addr string, port int) {
	t.Helper()
	h, eth0 := eth0Handle(t)
	defer h.Close()
	ip := net.ParseIP(addr)
	if err := h.AddrAdd(eth0, &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(64, 128)}, Flags: unix.IFA_F_NODAD}); err != nil {
		t.Fatal(err)
	}
	// The zone by index: Go's table of interface names is the host's.
	zone := strconv.Itoa(eth0.Attrs().Index)
	c, err := net.ListenUDP("udp6", &net.UDPAddr{IP: ip, Zone: zone})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 10 {
		if _, err := c.WriteToUDP([]byte("from the sandbox"), &net.UDPAddr{IP: net.ParseIP("ff02::1"), Zone: zone, Port: port}); err != nil {
			t.Fatal(err)
		}
	}
}

// eth0Handle is a netlink handle of the network namespace the calling thread is in, and its eth0.
func eth0Handle(t testing.TB) (*netlink.Handle, netlink.Link) {
	t.Helper()
	h, err := netlink.NewHandle()
	if err != nil {
		t.Fatal(err)
	}
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	return h, eth0
}
