package oci

import (
	"fmt"

	"github.com/sandboxd/sandbox/netpolicy"
)

// Warm pool entries with a link made ahead. A sandbox that needs a network and takes an entry without
// one gets its link then (attachNetwork: a veth pair, its addresses and route, the nftables
// transaction of its policy; ≈5 ms, where the take itself is ≈2 ms). NetworkConfig.WarmPoolLinks of
// the pool's entries are kept with their link made when they start instead: the veth pair, the
// entry's addresses (IPv6 too, with an IPv6 pool: every link of the provider has it) and its routes,
// forwarding on the host's end, and, when the provider knows which policy the next sandbox will ask
// for (network.expect), that policy's chains held in the firewall
// with their gate shut (Firewall.Hold). Until the entry is taken nothing comes through its link: the
// firewall drops whatever arrives from a sandbox interface whose chains are not in effect (forward
// and input: no other sandbox, no host address, no resolver), and the resolver, which tells its
// clients by their source address, does not know the entry's. Taking it is then one nftables
// transaction, the sandbox's policy in effect: the held chains' gate opened (one set element) when
// the policy is the one held, or the policy's chains replaced and opened together when it is not.
// Beside it, net.json names the sandbox's rules (before the entry's directory becomes the sandbox's,
// so that a provider that dies after sets those rules again); then the resolver learns the address.
//
// A sandbox that needs no network never takes an entry with a link (its namespace stays loopback
// only); one that needs a network takes an entry without a link when none with one is idle, and gets
// its link as before. An entry with a link is released like a sandbox (detachNetwork: its chains, its
// host end, the tracked flows of its address, then the address); a provider that starts removes every
// host end no running sandbox claims, the flows of every address none has, and the table, and forgets
// what the pool's directories record of their links before it discards them.

// entryLink is the link of a warm pool entry.
type entryLink struct {
	st    netState         // its interface and address, and the rules held (net.json's record)
	held  *netpolicy.Rules // the rules its chains hold in the firewall (Hold), nil: none
	epoch uint64           // held's
}

// holds reports whether the link's chains hold rules: a take then only opens them, and its net.json
// names them already.
func (lk *entryLink) holds(rules netpolicy.Rules) bool { return lk.held != nil && lk.held.Equal(rules) }

// wantsLink reports whether the next entry of the shared root's pool should get a link: fewer idle
// entries than NetworkConfig.WarmPoolLinks have one.
func (p *Provider) wantsLink() bool {
	return p.net != nil && p.pool.linked() < min(p.cfg.Network.WarmPoolLinks, p.cfg.WarmPool)
}

// linkEntry makes the link of the idle entry e, which is not in the pool yet, and its chains for the
// expected policy, held. On failure the caller removes what it made (unlinkEntry).
func (p *Provider) linkEntry(e *poolEntry) error {
	n := p.net
	ns, err := containerNetns(e.l)
	if err != nil {
		return err
	}
	defer ns.Close()
	addr, err := n.take()
	if err != nil {
		return err
	}
	lk := &entryLink{st: netState{Iface: n.newIface(), Addr: addr, Addr6: n.addr6(addr)}}
	expect := n.expect.Load()
	if expect != nil {
		// Recorded ahead for the sandbox that takes the entry under them (recordLink); nothing reads
		// the rules of an entry's net.json before its directory is a sandbox's.
		lk.st.Rules = *expect
	}
	if err := writeJSONFile(e.l.netFile(), lk.st); err != nil {
		n.give(addr)
		return err
	}
	e.link = lk // from here on, what is made is recorded: unlinkEntry removes it
	// Before the link is up: the base chains drop what it sends until a sandbox's rules are in effect.
	if expect != nil {
		epoch, err := n.fw.Hold(lk.st.Iface, lk.st.addrs(), *expect)
		if err != nil {
			return err
		}
		lk.held, lk.epoch = expect, epoch
	} else if err := n.fw.Ensure(); err != nil {
		return err
	}
	return n.link(ns, lk.st)
}

// unlinkEntry removes the link of the idle entry e, which it keeps as an entry without one.
func (p *Provider) unlinkEntry(e *poolEntry) error {
	if err := p.detachNetwork(e.l); err != nil {
		return err
	}
	e.link = nil
	return nil
}

// recordLink makes rules what the entry e's net.json records, before its directory becomes the
// sandbox's: a provider that dies once it has sets them again (startNetwork), and one that dies before
// discards the entry. The rules the entry's chains hold are recorded already (linkEntry).
func (p *Provider) recordLink(e poolEntry, rules netpolicy.Rules) error {
	if err := p.net.enableUplinks(); err != nil {
		return err
	}
	if e.link.holds(rules) {
		return nil
	}
	st := e.link.st
	st.Rules = rules
	return writeJSONFile(e.l.netFile(), st)
}

// openLink puts rules in effect on the link of the entry e, which a sandbox takes: one nftables
// transaction (Open when e holds them, Set otherwise), then the resolver knows the sandbox.
func (p *Provider) openLink(e poolEntry, rules netpolicy.Rules) error {
	n, st := p.net, e.link.st
	var epoch uint64
	var err error
	if e.link.holds(rules) {
		epoch, err = n.fw.Open(st.Iface)
	} else {
		epoch, err = n.fw.Set(st.Iface, st.addrs(), rules)
	}
	if err != nil {
		return fmt.Errorf("the policy of %s: %w", st.Iface, err)
	}
	if n.dns != nil {
		n.dns.Set(st.addrs(), st.Iface, rules, epoch)
	}
	return nil
}

// expectRules makes rules, which need a network, those the entries made from now on hold.
func (p *Provider) expectRules(rules netpolicy.Rules) {
	if p.net == nil || !rules.Needs() {
		return
	}
	if old := p.net.expect.Load(); old == nil || !old.Equal(rules) {
		p.net.expect.Store(&rules)
	}
}
