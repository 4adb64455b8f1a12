package oci

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"

	"github.com/vishvananda/netlink"
)

// The sandboxes' IPv6. With an IPv6 pool (NetworkConfig.Pool6) a sandbox's link carries, beside its
// IPv4 addresses, the pool's address at the offset of its IPv4 one (a /128, no duplicate detection)
// and a default route through the pool's first address, which the host's end of every link has.
//
// Linux forwards IPv6 only by the global net.ipv6.conf.all.forwarding: an interface's own forwarding
// switches its host or router behaviour, not whether packets pass. Turning it on makes every
// interface a router's, so one that takes its default route from router advertisements (accept_ra 1)
// would drop it, and the host would forward IPv6 between its other interfaces. So a provider that
// finds it off records first (ipv6File) what it changes, sets accept_ra 2 where it is 1, has its
// firewall drop forwarded IPv6 that no sandbox sends or receives (Firewall.GuardForwarding6), and
// only then turns forwarding on. The provider that closes with no sandbox on a network, or that starts
// and finds none of an earlier one's left, puts it all back.

// forwarding6 is what a provider changed of the host's IPv6 settings (ipv6File).
type forwarding6 struct {
	// AcceptRA are the entries of /proc/sys/net/ipv6/conf whose accept_ra was 1, set to 2.
	AcceptRA []string `json:"acceptRA"`
	// Forwarding are the interfaces whose own forwarding was 1 while all.forwarding was 0: turning
	// all.forwarding off sets every interface's to 0, and theirs are put back.
	Forwarding []string `json:"forwarding"`
}

const ipv6Conf = "/proc/sys/net/ipv6/conf"

// enableIPv6 turns the host's IPv6 forwarding on, when the provider has an IPv6 pool and it is off.
// Called with n.mu held.
func (n *network) enableIPv6() error {
	if !n.pool6.IsValid() {
		return nil
	}
	if v, err := readSysctl("ipv6/conf/all/forwarding"); err != nil || v == "1" {
		return err // on already (by the host's owner, or an earlier provider whose record is kept)
	}
	var rec forwarding6
	ents, err := os.ReadDir(ipv6Conf)
	if err != nil {
		return fmt.Errorf("IPv6 settings: %w", err)
	}
	for _, e := range ents {
		if v, err := readSysctl("ipv6/conf/" + e.Name() + "/accept_ra"); err == nil && v == "1" {
			rec.AcceptRA = append(rec.AcceptRA, e.Name())
		}
		if v, err := readSysctl("ipv6/conf/" + e.Name() + "/forwarding"); err == nil && v == "1" && e.Name() != "all" {
			rec.Forwarding = append(rec.Forwarding, e.Name())
		}
	}
	if err := writeJSONFile(n.ipv6File, rec); err != nil {
		return fmt.Errorf("IPv6 forwarding: %w", err)
	}
	if err := n.fw.GuardForwarding6(); err != nil {
		return err
	}
	for _, name := range rec.AcceptRA {
		if err := writeSysctl("ipv6/conf/"+name+"/accept_ra", "2"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("IPv6 router advertisements on %s: %w", name, err)
		}
	}
	if err := writeSysctl("ipv6/conf/all/forwarding", "1"); err != nil {
		return fmt.Errorf("IPv6 forwarding: %w", err)
	}
	return nil
}

// restoreIPv6 puts back what ipv6File records: IPv6 forwarding off, the interfaces' own forwarding and
// accept_ra as they were (an interface gone since is no error). Nothing recorded is nothing to do.
// Called with n.mu held (or before the provider serves), once no sandbox has a network.
func (n *network) restoreIPv6() error {
	raw, err := os.ReadFile(n.ipv6File)
	if os.IsNotExist(err) {
		return nil
	}
	var rec forwarding6
	if err == nil {
		err = json.Unmarshal(raw, &rec)
	}
	if err != nil {
		return fmt.Errorf("IPv6 forwarding: %w", err)
	}
	errs := []error{writeSysctl("ipv6/conf/all/forwarding", "0")}
	for _, name := range rec.Forwarding {
		errs = append(errs, writeSysctl("ipv6/conf/"+name+"/forwarding", "1"))
	}
	for _, name := range rec.AcceptRA {
		errs = append(errs, writeSysctl("ipv6/conf/"+name+"/accept_ra", "1"))
	}
	errs = slices.DeleteFunc(errs, func(err error) bool { return err == nil || errors.Is(err, os.ErrNotExist) })
	if len(errs) > 0 {
		return fmt.Errorf("IPv6 forwarding: %w", errors.Join(errs...))
	}
	if err := os.Remove(n.ipv6File); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// addr6 is the IPv6 address of the sandbox whose IPv4 address is a: the IPv6 pool's at a's offset in
// the IPv4 pool; invalid without an IPv6 pool.
func (n *network) addr6(a netip.Addr) netip.Addr {
	if !n.pool6.IsValid() {
		return netip.Addr{}
	}
	b4, p4 := a.As4(), n.cfg.Pool.Addr().As4()
	b6 := n.pool6.Addr().As16()
	for i := range 4 {
		b6[12+i] |= b4[i] &^ p4[i]
	}
	return netip.AddrFrom16(b6)
}

// uniqueLocal is IPv6's private range, where an IPv6 pool must lie.
var uniqueLocal = netip.MustParsePrefix("fc00::/7")

// pickPool6 is the IPv6 pool of cfg: Pool6, checked, or with AutoPool6 on a host with an IPv6 default
// route, the unique local /64 recorded in file (a random one, recorded, the first time).
func pickPool6(cfg NetworkConfig, file string) (netip.Prefix, error) {
	pr := cfg.Pool6
	if !pr.IsValid() {
		if !cfg.AutoPool6 || !hasIPv6Default() {
			return netip.Prefix{}, nil
		}
		if raw, err := os.ReadFile(file); err == nil && json.Unmarshal(raw, &pr) == nil && pr.IsValid() {
			return checkPool6(pr, cfg.Pool)
		}
		var rnd [7]byte
		rand.Read(rnd[:])
		// fd00::/8 with a random global ID (40 bits) and subnet (16 bits), as RFC 4193 says.
		pr = netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6]}), 64)
		if _, err := checkPool6(pr, cfg.Pool); err != nil {
			return netip.Prefix{}, err
		}
		if err := writeJSONFile(file, pr); err != nil {
			return netip.Prefix{}, fmt.Errorf("the IPv6 pool: %w", err)
		}
	}
	return checkPool6(pr, cfg.Pool)
}

// checkPool6 refuses an IPv6 pool that is not unique local or holds fewer addresses than pool.
func checkPool6(pr, pool netip.Prefix) (netip.Prefix, error) {
	if !pr.Addr().Is6() || pr.Addr().Is4In6() || pr.Addr().Zone() != "" || !uniqueLocal.Contains(pr.Addr()) || pr.Bits() < 8 ||
		128-pr.Bits() < 32-pool.Bits() {
		return netip.Prefix{}, fmt.Errorf("IPv6 network pool %s: a prefix inside fc00::/7 holding as many addresses as %s (at most /%d)", pr, pool, 96+pool.Bits())
	}
	return pr.Masked(), nil
}

// hasIPv6Default reports whether the host has an IPv6 default route.
func hasIPv6Default() bool {
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V6)
	if err != nil {
		return false
	}
	for _, r := range routes {
		if r.Dst == nil {
			return true
		}
		if ones, _ := r.Dst.Mask.Size(); ones == 0 && r.Dst.IP.IsUnspecified() {
			return true
		}
	}
	return false
}
