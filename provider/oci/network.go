package oci

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/netpolicy"
)

// A sandbox whose policy lets anything out gets a network of its own at allocation, once its container
// runs (cold or taken from the warm pool): a veth pair from the host into the network namespace the
// runtime made for it, a routed point-to-point link. The sandbox's end, eth0, has one address of the
// pool (a /32) and a default route through the pool's first address, which every sandbox's host end
// carries; the host end routes that one address. No bridge joins two sandboxes: each has a link of its
// own, and the daemon's nftables table (netpolicy.Firewall) holds each one's policy and masquerades
// the pool behind whatever interface the host routes a destination through. A sandbox whose egress is
// denied and which allows nothing keeps the runtime's loopback-only namespace: nothing is added.
//
// Everything added is named from the provider: the host ends' names begin with ifPrefix, the table is
// the provider's. A restarted provider sets again the rules of the sandboxes it finds running (their
// net.json) and removes every other host end of its prefix; a sandbox's namespace, and its end of the
// link, go with its container.

// NetworkConfig configures the sandboxes' networks.
type NetworkConfig struct {
	// Pool is where the sandboxes' addresses come from (IPv4; its first address is the gateway).
	// Default 10.203.0.0/16. Two providers on one host need pools apart.
	Pool netip.Prefix
	// DefaultEgress is the policy of a sandbox whose spec says none ("deny" or "allow"); default "deny".
	DefaultEgress string
	// Uplinks are the interfaces replies come back through, on which the provider turns IPv4
	// forwarding on when the first sandbox gets a network (and off again, where it was off, when it
	// closes with no sandbox on a network); default the interfaces of the host's IPv4 default routes.
	Uplinks []string
	// Resolvers are the upstream DNS servers ("host:port") the sandboxes' resolver forwards to;
	// default the nameservers of the host's /etc/resolv.conf.
	Resolvers []string
	// Pool6 is where the sandboxes' IPv6 addresses come from: a unique local prefix (inside fc00::/7)
	// holding at least as many addresses as Pool. A sandbox's IPv6 address is Pool6's at the offset
	// of its IPv4 one in Pool; the gateway is Pool6's first address. Unset: none (the sandboxes have
	// IPv4 only, and an IPv6 allow rule is refused), unless AutoPool6.
	Pool6 netip.Prefix
	// AutoPool6, when Pool6 is unset and the host has an IPv6 default route, takes a random unique
	// local /64 for Pool6 once and keeps it in the state directory (net-pool6).
	AutoPool6 bool
	// Off leaves every sandbox on loopback, whatever its policy asks: a policy that needs a network
	// is refused (ErrUnsupportedCapability).
	Off bool
	// WarmPoolLinks is how many of the warm pool's entries (Config.WarmPool, at most all of them) are
	// kept with a link made ahead, so that a sandbox that needs a network and takes one only has its
	// policy put in effect (poolnet.go). Zero: none; such a sandbox gets its link when it takes an
	// entry without one.
	WarmPoolLinks int
}

// defaultPool is NetworkConfig.Pool's default.
var defaultPool = netip.MustParsePrefix("10.203.0.0/16")

// networkEtc are the sandboxes' /etc files that name their resolver, the daemon's on the gateway
// (netpolicy.Forwarder), and on the IPv6 gateway with an IPv6 pool; a sandbox on loopback only
// cannot reach it, and a name fails at once.
func (p *Provider) networkEtc() map[string]string {
	cfg := p.cfg.Network
	if cfg.Off || p.runc.class != classRunc {
		return nil
	}
	pool := cmpPrefix(cfg.Pool, defaultPool)
	servers := "nameserver " + pool.Masked().Addr().Next().String() + "\n"
	if cfg.Pool6.IsValid() {
		servers += "nameserver " + cfg.Pool6.Masked().Addr().Next().String() + "\n"
	}
	return map[string]string{
		"resolv.conf":   servers + "options timeout:2 attempts:2\n",
		"nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
	}
}

func cmpPrefix(a, b netip.Prefix) netip.Prefix {
	if a.IsValid() {
		return a
	}
	return b
}

// guestIface is the sandbox's end of its link.
const guestIface = "eth0"

// netState is what a sandbox's directory records of its network (net.json), so that release and a
// restarted provider find it.
type netState struct {
	Iface string          `json:"iface"`
	Addr  netip.Addr      `json:"addr"`
	Addr6 netip.Addr      `json:"addr6,omitzero"` // none when the provider has no IPv6 pool
	Rules netpolicy.Rules `json:"rules"`
}

// addrs are st's addresses, as the firewall takes them.
func (st netState) addrs() netpolicy.Addrs { return netpolicy.Addrs{V4: st.Addr, V6: st.Addr6} }

func (l layout) netFile() string { return filepath.Join(l.dir, "net.json") }
func (l layout) pidFile() string { return filepath.Join(l.dir, "init.pid") }

// network is the provider's share of the host's network.
type network struct {
	cfg      NetworkConfig
	fw       *netpolicy.Firewall
	dns      *netpolicy.Forwarder // nil: no rules by name
	ifPrefix string
	gateway  netip.Addr
	pool6    netip.Prefix // invalid: no IPv6
	gateway6 netip.Addr

	// expect is the policy the entries of the warm pool get their links for (held in the firewall,
	// poolnet.go): the daemon's default when it needs a network, then the last create's that did.
	expect atomic.Pointer[netpolicy.Rules]

	mu       sync.Mutex
	used     map[netip.Addr]bool
	next     netip.Addr // where take looks first, kept in nextFile
	nextFile string
	uplinkOn bool
	// uplinksFile lists the uplinks whose forwarding a provider on this state directory turned on:
	// the provider that closes with no sandbox on a network turns it off again. ipv6File records
	// what it changed of the host's IPv6 settings to turn IPv6 forwarding on (forwarding6).
	uplinksFile, ipv6File string
}

// startNetwork makes the provider's table afresh, sets again the rules of the sandboxes an earlier
// provider left running, and removes every other host interface of the provider's. Called by New once
// the runtime's containers are listed.
func (p *Provider) startNetwork() error {
	cfg := p.cfg.Network
	if cfg.Off || p.runc.class != classRunc {
		return nil
	}
	cfg.Pool = cmpPrefix(cfg.Pool, defaultPool)
	if cfg.DefaultEgress == "" {
		cfg.DefaultEgress = netpolicy.EgressDeny
	}
	if !cfg.Pool.Addr().Is4() || cfg.Pool.Bits() > 29 {
		return fmt.Errorf("network pool %s: an IPv4 prefix of at most /29", cfg.Pool)
	}
	if _, err := netpolicy.Parse(nil, cfg.DefaultEgress); err != nil {
		return fmt.Errorf("default egress: %w", err)
	}
	cfg.Pool = cfg.Pool.Masked()
	n := &network{cfg: cfg, ifPrefix: "sx" + p.cgTag[:4], used: map[netip.Addr]bool{},
		nextFile: filepath.Join(p.cfg.StateDir, "net-next"), uplinksFile: filepath.Join(p.cfg.StateDir, "net-uplinks"),
		ipv6File: filepath.Join(p.cfg.StateDir, "net-ipv6")}
	n.gateway = cfg.Pool.Addr().Next()
	pool6, err := pickPool6(cfg, filepath.Join(p.cfg.StateDir, "net-pool6"))
	if err != nil {
		return err
	}
	if pool6.IsValid() {
		n.pool6, n.gateway6 = pool6, pool6.Addr().Next()
	}
	n.next = n.firstNext()
	if rules, _ := netpolicy.Parse(nil, cfg.DefaultEgress); rules.Needs() {
		n.expect.Store(&rules)
	}
	fw, err := netpolicy.NewFirewall("sandboxd_"+p.cgTag, cfg.Pool, n.pool6, n.ifPrefix)
	if err != nil {
		return err
	}
	n.fw = fw
	if n.dns, err = startResolver(fw, cfg.Resolvers, p.log); err != nil {
		// Rules by name are refused then; the rest works.
		p.log.Warn("the sandboxes' resolver did not start; policies with names are refused", "err", err)
	}
	kept := map[string]bool{}
	used6 := map[netip.Addr]bool{}
	ents, _ := os.ReadDir(p.boxDir)
	for _, e := range ents {
		l := layout{dir: filepath.Join(p.boxDir, e.Name())}
		st, err := readNetState(l)
		if err != nil {
			continue
		}
		m, err := readMetaFile(l)
		if err != nil {
			continue
		}
		name := m.Container
		if name == "" {
			name = m.Ref.Name()
		}
		cs, ok := p.found[name]
		if !ok || cs.Status == "stopped" || !strings.HasPrefix(st.Iface, n.ifPrefix) || !cfg.Pool.Contains(st.Addr) {
			continue
		}
		if _, err := netlink.LinkByName(st.Iface); err != nil {
			continue
		}
		epoch, err := fw.Set(st.Iface, st.addrs(), st.Rules)
		if err != nil {
			p.log.Warn("setting again the rules of a running sandbox", "dir", e.Name(), "err", err)
			continue
		}
		n.used[st.Addr] = true
		used6[st.Addr6] = true
		kept[st.Iface] = true
		if n.dns != nil {
			n.dns.Set(st.addrs(), st.Iface, st.Rules, epoch)
		}
	}
	// What the host's connection tracking still holds of an address no running sandbox has is an
	// earlier sandbox's: a sandbox given the address again would receive its replies and send on its
	// flows as established.
	stale := func(a netip.Addr) bool {
		return cfg.Pool.Contains(a) && a != n.gateway && !n.used[a] || n.pool6.Contains(a) && a != n.gateway6 && !used6[a]
	}
	if err := forgetFlows(stale, n.pool6.IsValid()); err != nil {
		if n.dns != nil {
			n.dns.Close()
		}
		return err
	}
	// The host's IPv6 forwarding an earlier provider turned on: off again when none of its sandboxes
	// is left, and otherwise guarded (what no sandbox sends or receives is not forwarded).
	if _, err := os.Stat(n.ipv6File); err == nil {
		if len(n.used) == 0 {
			err = n.restoreIPv6()
		} else {
			err = fw.GuardForwarding6()
		}
		if err != nil {
			p.log.Error("the host's IPv6 forwarding an earlier provider turned on", "err", err)
		}
	}
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	for _, link := range links {
		name := link.Attrs().Name
		if strings.HasPrefix(name, n.ifPrefix) && !kept[name] {
			p.log.Warn("removing a sandbox interface no running sandbox claims", "iface", name)
			if err := netlink.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
				p.log.Error("removing a sandbox interface", "iface", name, "err", err)
			}
		}
	}
	// The pool's entries an earlier provider left are discarded (discardLeftovers): their links went
	// above with every host end no sandbox claims, and their addresses' flows with the rest. What
	// their net.json records is no longer theirs: the addresses may be given again meanwhile.
	dirs, _ := os.ReadDir(p.pool.dir)
	for _, e := range dirs {
		if err := os.Remove(layout{dir: filepath.Join(p.pool.dir, e.Name())}.netFile()); err != nil && !os.IsNotExist(err) {
			p.log.Warn("forgetting the link of a pool entry left by an earlier run", "entry", e.Name(), "err", err)
		}
	}
	p.net = n
	return nil
}

// closeNetwork removes the provider's table when no sandbox has rules in it: a provider that closes
// leaves its sandboxes running, with their network, for the next one.
func (p *Provider) closeNetwork() error {
	if p.net == nil {
		return nil
	}
	if p.net.dns != nil {
		p.net.dns.Close()
	}
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	if len(p.net.used) > 0 {
		return nil
	}
	// The host's forwarding first: while the table is there, it guards what forwarding lets through.
	return errors.Join(p.net.restoreUplinks(), p.net.restoreIPv6(), p.net.fw.Close())
}

// networkRules are the checked policy of spec, with the daemon's default for what it leaves out.
// Errors: ErrInvalidRequest for a malformed policy, ErrUnsupportedCapability for one this provider
// cannot enforce (names, until the sandboxes have a resolver; any network on a provider without one;
// an IPv6 destination allowed, where the sandboxes have no IPv6).
func (p *Provider) networkRules(spec sandbox.Spec) (netpolicy.Rules, error) {
	rules, err := netpolicy.Parse(spec.Extensions[netpolicy.ExtensionKey], p.defaultEgress())
	if err != nil {
		return rules, err
	}
	if rules.Needs() && p.net == nil {
		return rules, fmt.Errorf("%s: this provider runs sandboxes on loopback only: %w", netpolicy.ExtensionKey, sandbox.ErrUnsupportedCapability)
	}
	if pr, ok := rules.AllowsIPv6(); ok && (p.net == nil || !p.net.pool6.IsValid()) {
		return rules, fmt.Errorf("%s: allow rule %s: this provider gives its sandboxes no IPv6 (IPv4 only): %w", netpolicy.ExtensionKey, pr, sandbox.ErrUnsupportedCapability)
	}
	if names := slices.Concat(rules.AllowNames, rules.DenyNames); len(names) > 0 && (p.net == nil || p.net.dns == nil) {
		return rules, fmt.Errorf("%s: rules by name (%s) need the sandboxes' resolver, which is not running: %w", netpolicy.ExtensionKey, names[0], sandbox.ErrUnsupportedCapability)
	}
	return rules, nil
}

// defaultEgress is the egress of a sandbox whose policy does not say.
func (p *Provider) defaultEgress() string {
	if p.cfg.Network.DefaultEgress == "" {
		return netpolicy.EgressDeny
	}
	return p.cfg.Network.DefaultEgress
}

// attachNetwork gives the running container of b a network under rules; nothing when rules need none.
// On failure, what it added is removed by the caller's release (net.json is written first).
func (p *Provider) attachNetwork(b *box, rules netpolicy.Rules) error {
	if !rules.Needs() {
		return nil
	}
	n := p.net
	ns, err := containerNetns(b.l)
	if err != nil {
		return err
	}
	defer ns.Close()
	if err := n.enableUplinks(); err != nil {
		return err
	}
	addr, err := n.take()
	if err != nil {
		return err
	}
	st := netState{Iface: n.newIface(), Addr: addr, Addr6: n.addr6(addr), Rules: rules}
	if err := writeJSONFile(b.l.netFile(), st); err != nil {
		n.give(addr)
		return err
	}
	// The rules match the host end by name: they are set while the link is made, once the table is
	// there, whose base chains drop what comes from the link until they are.
	if err := n.fw.Ensure(); err != nil {
		return err
	}
	fwErr := make(chan error, 1)
	var epoch uint64
	go func() {
		var err error
		epoch, err = n.fw.Set(st.Iface, st.addrs(), rules)
		fwErr <- err
	}()
	err = n.link(ns, st)
	if err = errors.Join(err, <-fwErr); err != nil {
		return err
	}
	if n.dns != nil {
		n.dns.Set(st.addrs(), st.Iface, rules, epoch)
	}
	return nil
}

// containerNetns opens the network namespace of the running container in l.
func containerNetns(l layout) (netns.NsHandle, error) {
	m, err := readMetaFile(l)
	if err != nil {
		return 0, err
	}
	pid, err := containerPid(l, m.CgroupPath)
	if err != nil {
		return 0, err
	}
	ns, err := netns.GetFromPath("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return 0, fmt.Errorf("the sandbox's network namespace: %w", err)
	}
	return ns, nil
}

// newIface names a new host end.
func (n *network) newIface() string {
	var rnd [4]byte
	rand.Read(rnd[:])
	return n.ifPrefix + hex.EncodeToString(rnd[:])
}

// link makes st's veth pair, its host end in the host's namespace and its other end, eth0, in ns.
func (n *network) link(ns netns.NsHandle, st netState) error {
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: st.Iface}, PeerName: guestIface, PeerNamespace: netlink.NsFd(int(ns))}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth %s: %w", st.Iface, err)
	}
	if err := n.hostEnd(st); err != nil {
		return err
	}
	return n.guestEnd(ns, st)
}

// hostEnd configures the host's end of st's link: the gateway's address with the sandbox's as its
// peer, forwarding, and IPv6 off unless the sandbox has an IPv6 address (then the IPv6 gateway's and a
// route to the sandbox's through the link, and no router advertisements accepted).
func (n *network) hostEnd(st netState) error {
	link, err := netlink.LinkByName(st.Iface)
	if err != nil {
		return err
	}
	sysctls := [][2]string{{"ipv6/conf/%s/disable_ipv6", "1"}, {"ipv4/conf/%s/forwarding", "1"}}
	if st.Addr6.IsValid() {
		sysctls = [][2]string{{"ipv6/conf/%s/accept_ra", "0"}, {"ipv6/conf/%s/disable_ipv6", "0"}, {"ipv4/conf/%s/forwarding", "1"}}
	}
	for _, kv := range sysctls {
		if err := writeSysctl(fmt.Sprintf(kv[0], st.Iface), kv[1]); err != nil {
			return err
		}
	}
	// A point-to-point address: the kernel routes the peer, the sandbox's address, through the link.
	if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: hostNet(n.gateway), Peer: hostNet(st.Addr)}); err != nil {
		return fmt.Errorf("address of %s: %w", st.Iface, err)
	}
	if st.Addr6.IsValid() {
		// IPv6 has no peer address: the gateway's /128, and a route to the sandbox's through the link.
		if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: hostNet(n.gateway6), Flags: unix.IFA_F_NODAD}); err != nil {
			return fmt.Errorf("IPv6 address of %s: %w", st.Iface, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return err
	}
	if st.Addr6.IsValid() {
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: hostNet(st.Addr6), Scope: netlink.SCOPE_LINK}); err != nil {
			return fmt.Errorf("IPv6 route to %s: %w", st.Iface, err)
		}
	}
	return nil
}

// guestEnd configures the sandbox's end: its addresses, up, and its default routes through the
// gateway.
func (n *network) guestEnd(ns netns.NsHandle, st netState) error {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	link, err := h.LinkByName(guestIface)
	if err != nil {
		return err
	}
	if err := h.AddrAdd(link, &netlink.Addr{IPNet: hostNet(st.Addr), Peer: hostNet(n.gateway)}); err != nil {
		return err
	}
	if st.Addr6.IsValid() {
		if err := h.AddrAdd(link, &netlink.Addr{IPNet: hostNet(st.Addr6), Flags: unix.IFA_F_NODAD}); err != nil {
			return err
		}
	}
	if err := h.LinkSetUp(link); err != nil {
		return err
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: net.IP(n.gateway.AsSlice())}); err != nil {
		return err
	}
	if st.Addr6.IsValid() {
		// The gateway is on the link (onlink): no route to it of its own.
		return h.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: net.IP(n.gateway6.AsSlice()), Flags: int(netlink.FLAG_ONLINK)})
	}
	return nil
}

// detachNetwork removes what attachNetwork added for the sandbox in l: its rules, its host end (gone
// already with its namespace, usually), the host's connection tracking entries of its address, and
// the address. Nothing recorded is nothing to do.
func (p *Provider) detachNetwork(l layout) error {
	st, err := readNetState(l)
	if os.IsNotExist(err) || p.net == nil {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Iface == "" { // a policy recorded, no network
		return os.Remove(l.netFile())
	}
	if p.net.dns != nil {
		p.net.dns.Remove(st.addrs())
	}
	if err := p.net.fw.Remove(st.Iface); err != nil {
		return err
	}
	if link, err := netlink.LinkByName(st.Iface); err == nil {
		if err := netlink.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
			return fmt.Errorf("remove %s: %w", st.Iface, err)
		}
	}
	// Once the link is gone nothing adds a flow of the address; those there go before the address
	// can be another sandbox's.
	if err := forgetFlows(func(a netip.Addr) bool { return a == st.Addr || st.Addr6.IsValid() && a == st.Addr6 }, st.Addr6.IsValid()); err != nil {
		return err
	}
	p.net.give(st.Addr)
	return os.Remove(l.netFile())
}

// take reserves a free address of the pool: the first free one from where the last take stopped, so
// that an address released comes back only once the pool has gone round (across restarts too: the
// position is kept in nextFile).
func (n *network) take() (netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for range 1 << (32 - n.cfg.Pool.Bits()) {
		a := n.next
		n.next = a.Next()
		if !n.hostAddr(n.next) {
			n.next = n.gateway.Next()
		}
		if n.hostAddr(a) && !n.used[a] {
			if err := writeJSONFile(n.nextFile, n.next); err != nil {
				return netip.Addr{}, fmt.Errorf("the network pool's position: %w", err)
			}
			n.used[a] = true
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("the network pool %s is exhausted", n.cfg.Pool)
}

// hostAddr reports whether a is an address of the pool a sandbox may have: neither the gateway nor
// the network's or broadcast address.
func (n *network) hostAddr(a netip.Addr) bool {
	return n.cfg.Pool.Contains(a) && a != n.cfg.Pool.Addr() && a != n.gateway && a != lastAddr(n.cfg.Pool)
}

// firstNext is where the first take looks: where the last provider's stopped, or, without a record of
// it, anywhere in the pool.
func (n *network) firstNext() netip.Addr {
	var a netip.Addr
	if raw, err := os.ReadFile(n.nextFile); err == nil && json.Unmarshal(raw, &a) == nil && n.hostAddr(a) {
		return a
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	size := uint32(1) << (32 - n.cfg.Pool.Bits())
	off := 2 + (uint32(rnd[0])<<24|uint32(rnd[1])<<16|uint32(rnd[2])<<8|uint32(rnd[3]))%(size-3)
	b := n.cfg.Pool.Addr().As4()
	v := (uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])) + off
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// forgetFlows deletes the host's connection tracking entries of the IPv4 flows (and, with v6, the
// IPv6 ones) one of whose addresses stale reports.
func forgetFlows(stale func(netip.Addr) bool, v6 bool) error {
	fams := []netlink.InetFamily{unix.AF_INET}
	if v6 {
		fams = append(fams, unix.AF_INET6)
	}
	for _, fam := range fams {
		var err error
		for range 3 { // a dump the kernel interrupted is done again
			_, err = netlink.ConntrackDeleteFilters(netlink.ConntrackTable, fam, flowFilter(stale))
			if !errors.Is(err, netlink.ErrDumpInterrupted) {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("connection tracking: %w", err)
		}
	}
	return nil
}

// flowFilter matches a connection tracking entry one of whose addresses, either way, it reports.
type flowFilter func(netip.Addr) bool

func (f flowFilter) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	for _, ip := range []net.IP{flow.Forward.SrcIP, flow.Forward.DstIP, flow.Reverse.SrcIP, flow.Reverse.DstIP} {
		if a, ok := netip.AddrFromSlice(ip); ok && f(a.Unmap()) {
			return true
		}
	}
	return false
}

func (n *network) give(a netip.Addr) {
	n.mu.Lock()
	delete(n.used, a)
	n.mu.Unlock()
}

// enableUplinks turns IPv4 forwarding on on the uplinks, once: replies to the sandboxes come in there.
// Those where it was off are recorded first (uplinksFile), for restoreUplinks. With an IPv6 pool, the
// host's IPv6 forwarding too (enableIPv6).
func (n *network) enableUplinks() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.uplinkOn {
		return nil
	}
	ups := n.cfg.Uplinks
	if len(ups) == 0 {
		routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: nil}, netlink.RT_FILTER_DST)
		if err != nil {
			return fmt.Errorf("default routes: %w", err)
		}
		for _, r := range routes {
			if link, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
				ups = append(ups, link.Attrs().Name)
			}
		}
	}
	changed := n.changedUplinks()
	for _, up := range ups {
		key := fmt.Sprintf("ipv4/conf/%s/forwarding", up)
		if v, err := readSysctl(key); err == nil && v == "1" {
			continue
		}
		if !slices.Contains(changed, up) {
			changed = append(changed, up)
			if err := writeJSONFile(n.uplinksFile, changed); err != nil {
				return fmt.Errorf("uplink %s: %w", up, err)
			}
		}
		if err := writeSysctl(key, "1"); err != nil {
			return fmt.Errorf("uplink %s: %w", up, err)
		}
	}
	if err := n.enableIPv6(); err != nil {
		return err
	}
	n.uplinkOn = true
	return nil
}

// changedUplinks are the uplinks uplinksFile records.
func (n *network) changedUplinks() []string {
	var ups []string
	if raw, err := os.ReadFile(n.uplinksFile); err == nil {
		json.Unmarshal(raw, &ups)
	}
	return ups
}

// restoreUplinks turns forwarding off again on the uplinks where a provider on this state directory
// turned it on (an uplink gone since is no error). Called with n.mu held, once no sandbox has a network.
func (n *network) restoreUplinks() error {
	var errs []error
	for _, up := range n.changedUplinks() {
		if err := writeSysctl(fmt.Sprintf("ipv4/conf/%s/forwarding", up), "0"); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("uplink %s: %w", up, err))
		}
	}
	if len(errs) == 0 {
		n.uplinkOn = false
		if err := os.Remove(n.uplinksFile); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// startResolver starts the sandboxes' resolver, forwarding to upstreams, or to the host's resolvers.
func startResolver(fw *netpolicy.Firewall, upstreams []string, log *slog.Logger) (*netpolicy.Forwarder, error) {
	if len(upstreams) == 0 {
		conf, err := dns.ClientConfigFromFile("/etc/resolv.conf")
		if err != nil {
			return nil, err
		}
		for _, s := range conf.Servers {
			upstreams = append(upstreams, net.JoinHostPort(s, conf.Port))
		}
	}
	return netpolicy.NewForwarder(fw, upstreams, log)
}

func lastAddr(pr netip.Prefix) netip.Addr {
	a := pr.Masked().Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v |= 1<<(32-pr.Bits()) - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func hostNet(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}
}

func readSysctl(key string) (string, error) {
	if strings.Contains(key, "..") {
		return "", fmt.Errorf("sysctl %q", key)
	}
	raw, err := os.ReadFile("/proc/sys/net/" + key)
	return strings.TrimSpace(string(raw)), err
}

func writeSysctl(key, val string) error {
	if strings.Contains(key, "..") {
		return fmt.Errorf("sysctl %q", key)
	}
	return os.WriteFile("/proc/sys/net/"+key, []byte(val), 0o644)
}

func readNetState(l layout) (netState, error) {
	raw, err := os.ReadFile(l.netFile())
	if err != nil {
		return netState{}, err
	}
	var st netState
	if err := json.Unmarshal(raw, &st); err != nil {
		return netState{}, fmt.Errorf("%s: %w", l.netFile(), err)
	}
	return st, nil
}

// containerPid is the host pid of the container's init in l, as the runtime recorded it, checked to be
// a process of the container's cgroup (not a pid reused since).
func containerPid(l layout, cgroupPath string) (int, error) {
	raw, err := os.ReadFile(l.pidFile())
	if err != nil {
		return 0, fmt.Errorf("the container's pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("the container's pid %q", raw)
	}
	cg, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return 0, fmt.Errorf("the container's init: %w", err)
	}
	for _, line := range strings.Split(string(cg), "\n") {
		if _, path, ok := strings.Cut(line, ":"); ok {
			if _, path, ok = strings.Cut(path, ":"); ok && path == cgroupPath {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("pid %d is not in the container's cgroup %s", pid, cgroupPath)
}
