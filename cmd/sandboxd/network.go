package main

import (
	"flag"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/sandboxd/sandbox/netpolicy"
	"github.com/sandboxd/sandbox/provider/oci"
)

// OCINetwork are the flags of the oci provider's sandbox networks (provider/oci/network.go).
type OCINetwork struct {
	Off  bool
	Pool netip.Prefix
	// Pool6 is the IPv6 pool; unset, one is taken when the host has an IPv6 default route, unless
	// Pool6Off.
	Pool6    netip.Prefix
	Pool6Off bool
	Egress   string
	Uplinks  []string
	// PoolLinks is how many of the warm pool's entries keep a network link made ahead; unset
	// (poolLinksSet false), poolLinks' default.
	PoolLinks    int
	poolLinksSet bool
}

func (n *OCINetwork) register(fs *flag.FlagSet) {
	fs.BoolVar(&n.Off, "oci-network-off", n.Off, "oci provider: keep every sandbox on loopback only; a policy that lets something out is refused (422)")
	fs.Func("oci-network-pool", "oci provider: the IPv4 prefix the sandboxes' addresses come from (default 10.203.0.0/16)", func(v string) error {
		p, err := netip.ParsePrefix(v)
		if err != nil || !p.Addr().Is4() || p.Bits() > 29 || p.Masked() != p {
			return fmt.Errorf("want an IPv4 network of at most /29, such as 10.203.0.0/16")
		}
		n.Pool = p
		return nil
	})
	fs.Func("oci-network-pool6", "oci provider: the IPv6 prefix the sandboxes' IPv6 addresses come from, inside fc00::/7 and holding as many addresses as --oci-network-pool; auto (the default): a random one of fd00::/8 when the host has an IPv6 default route, kept in the state directory; off: IPv4 only", func(v string) error {
		n.Pool6, n.Pool6Off = netip.Prefix{}, false
		switch v {
		case "auto":
			return nil
		case "off":
			n.Pool6Off = true
			return nil
		}
		p, err := netip.ParsePrefix(v)
		if err != nil || !p.Addr().Is6() || p.Addr().Is4In6() || !netip.MustParsePrefix("fc00::/7").Contains(p.Addr()) || p.Bits() < 8 || p.Masked() != p {
			return fmt.Errorf("want auto, off, or an IPv6 network inside fc00::/7, such as fd5b:2c1e:77a0::/64")
		}
		n.Pool6 = p
		return nil
	})
	fs.Func("oci-network-egress", "oci provider: the egress of a sandbox whose spec has no sandboxd.network policy: deny (loopback only) or allow (default deny)", func(v string) error {
		if v != netpolicy.EgressDeny && v != netpolicy.EgressAllow {
			return fmt.Errorf("want %s or %s", netpolicy.EgressDeny, netpolicy.EgressAllow)
		}
		n.Egress = v
		return nil
	})
	fs.Func("oci-warm-pool-network", "oci provider: how many of --oci-warm-pool's entries keep a network link made ahead, so that a sandbox with a network that takes one is only given its policy (default: all of them under --oci-network-egress allow, else none)", func(v string) error {
		k, err := strconv.Atoi(v)
		if err != nil || k < 0 || k > 1000 {
			return fmt.Errorf("want a number between 0 and 1000")
		}
		n.PoolLinks, n.poolLinksSet = k, true
		return nil
	})
	fs.Func("oci-network-uplinks", "oci provider: the interfaces replies to the sandboxes come back through, comma separated, on which IPv4 forwarding is turned on (default: those of the default routes)", func(v string) error {
		n.Uplinks = nil
		for _, u := range strings.Split(v, ",") {
			if u = strings.TrimSpace(u); u != "" {
				if strings.ContainsAny(u, "/.") || len(u) > 15 {
					return fmt.Errorf("interface name %q", u)
				}
				n.Uplinks = append(n.Uplinks, u)
			}
		}
		return nil
	})
}

func (n OCINetwork) config(warmPool int) oci.NetworkConfig {
	return oci.NetworkConfig{Off: n.Off, Pool: n.Pool, Pool6: n.Pool6, AutoPool6: !n.Pool6Off, DefaultEgress: n.Egress,
		Uplinks: n.Uplinks, WarmPoolLinks: n.poolLinks(warmPool)}
}

// poolLinks is how many of warmPool entries keep a link: --oci-warm-pool-network, or by default all of
// them when a sandbox without a policy gets a network (egress allow), and none otherwise: a sandbox
// never takes an entry of the other kind than it needs, so entries kept for the few sandboxes that
// ask for a network would be taken from the many on loopback.
func (n OCINetwork) poolLinks(warmPool int) int {
	switch {
	case n.poolLinksSet:
		return n.PoolLinks
	case n.Egress == netpolicy.EgressAllow:
		return warmPool
	}
	return 0
}

// check refuses a count of linked entries past the pool's.
func (n OCINetwork) check(warmPool int) error {
	if n.poolLinksSet && n.PoolLinks > warmPool {
		return fmt.Errorf("--oci-warm-pool-network %d is more than --oci-warm-pool's %d entries", n.PoolLinks, warmPool)
	}
	return nil
}
