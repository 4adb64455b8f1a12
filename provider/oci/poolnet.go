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
// for (network.expect), that policy in effect: its chains in the firewall (Firewall.Set) and the
// resolver knowing the entry's addresses, before the link comes up. An entry without a policy
// reaches nothing: the firewall drops whatever arrives from a sandbox interface without chains
// (forward and input: no other sandbox, no host address, no resolver), and the resolver, which tells
// its clients by their source address, does not know the entry's.
//
// An idle entry runs the agent alone, the provider's own program: nothing a sandbox controls runs in
// it before a sandbox takes it, so its policy may be in effect early. Taking an entry under the
// policy in effect on it then changes nothing of the network (net.json records that policy from the
// start). Taking it under another replaces its chains in one nftables transaction, beside the
// rewrite of its net.json (before the entry's directory becomes the sandbox's, so that a provider
// that dies after sets those rules again), both before the sandbox is ready. A transaction that adds
// a sandbox's chains and jumps costs milliseconds (the kernel checks the table's chains for loops,
// more of them the more sandboxes there are): made ahead, it is off the create's path.
//
// A sandbox that needs no network never takes an entry with a link (its namespace stays loopback
// only); one that needs a network takes an entry without a link when none with one is idle, and gets
// its link as before. An entry with a link is released like a sandbox (detachNetwork: its chains, its
// host end, the tracked flows of its address, then the address); a provider that starts removes every
// host end no running sandbox claims, the flows of every address none has, and the table, and forgets
// what the pool's directories record of their links before it discards them.

// entryLink is the link of a warm pool entry.
type entryLink struct {
	st    netState         // its interface and address, and the rules in effect (net.json's record)
	rules *netpolicy.Rules // the rules in effect on the link (Firewall.Set), nil: none
}

// under reports whether rules are in effect on the link already, and named by its net.json: a
// sandbox that takes the entry under them changes nothing of its network.
func (lk *entryLink) under(rules netpolicy.Rules) bool {
	return lk.rules != nil && lk.rules.Equal(rules)
}

// wantsLink reports whether the next entry of the shared root's pool should get a link: fewer idle
// entries than NetworkConfig.WarmPoolLinks have one.
func (p *Provider) wantsLink() bool {
	return p.net != nil && p.pool.linked() < min(p.cfg.Network.WarmPoolLinks, p.cfg.WarmPool)
}

// linkEntry makes the link of the idle entry e, which is not in the pool yet, with the expected
// policy in effect. On failure the caller removes what it made (unlinkEntry).
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
	// Before the link is up: without a policy, the base chains drop what it sends.
	if expect != nil {
		epoch, err := n.fw.Set(lk.st.Iface, lk.st.addrs(), *expect)
		if err != nil {
			return err
		}
		if n.dns != nil {
			n.dns.Set(lk.st.addrs(), lk.st.Iface, *expect, epoch)
		}
		lk.rules = expect
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
// discards the entry. The rules in effect on the entry's link are recorded already (linkEntry).
func (p *Provider) recordLink(e poolEntry, rules netpolicy.Rules) error {
	if err := p.net.enableUplinks(); err != nil {
		return err
	}
	if e.link.under(rules) {
		return nil
	}
	st := e.link.st
	st.Rules = rules
	return writeJSONFile(e.l.netFile(), st)
}

// openLink puts rules, which are not in effect on the link of the entry e that a sandbox takes, in
// effect there: one nftables transaction, then the resolver knows the sandbox's.
func (p *Provider) openLink(e poolEntry, rules netpolicy.Rules) error {
	n, st := p.net, e.link.st
	epoch, err := n.fw.Set(st.Iface, st.addrs(), rules)
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
