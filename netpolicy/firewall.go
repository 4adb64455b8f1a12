package netpolicy

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Firewall is the one nftables table (family inet) the daemon owns, there while a sandbox has rules. It never touches another table.
// Its base chains pass every packet that is not a sandbox's, so the host's other traffic goes on as
// the host's own rules say:
//
//	forward (filter, priority 0): per sandbox, iifname X jump fwd-X; then traffic into any sandbox
//	  interface only when established; anything else from one dropped; anything for an address of
//	  the pools through an interface not a sandbox's dropped (the replies to a sandbox whose link is
//	  gone never take the host's default route); with GuardForwarding6, any other IPv6 dropped
//	  (the host, whose global IPv6 forwarding is on for the sandboxes alone, routes none of it).
//	input (filter, priority 0): per sandbox, iifname X jump in-X; anything else from one dropped.
//	postrouting (nat, priority 100): the pools' addresses masqueraded behind the outgoing interface.
//
// fwd-X and in-X hold sandbox X's policy (rules); a policy change replaces them in one transaction, so
// every packet meets the old rules or the new ones. Established connections keep going. (A
// transaction that adds the jumps has the kernel check the whole table's chains for loops, which with
// a few dozen sandboxes takes milliseconds: a warm pool makes an entry's chains before a sandbox
// takes it.)
type Firewall struct {
	table    *nftables.Table
	pool     netip.Prefix
	gateway  netip.Addr // the pool's first address: the host's end of every link, and the resolver's
	pool6    netip.Prefix
	gateway6 netip.Addr // pool6's first address, the host's end of every link over IPv6; invalid: no pool6
	ifPrefix string
	// guard6 adds to the base forward chain the rule that drops forwarded IPv6 no sandbox sends or
	// receives (GuardForwarding6).
	guard6 bool
	// resolver6 is set once the resolver listens on gateway6 too: the sandboxes' DNS to it passes.
	resolver6 bool

	mu   sync.Mutex
	conn *nftables.Conn
	fwd  *nftables.Chain
	in   *nftables.Chain
	set  map[string]bool // the interfaces with chains
	v6   map[string]bool // those of them whose sandbox has an IPv6 address (and chains for it)
	// learned holds, per interface, when each address learned from a resolved name stops being
	// allowed: the set's own timeouts, kept to tell when an answer extends one.
	learned map[string]map[netip.Addr]time.Time
	// refused holds, per interface, the time of each denial as Status last told it: computed from the
	// element's remaining timeout, it moves by the clock's jitter from one read to the next.
	refused map[string]map[netip.Addr]time.Time
	// epoch holds, per interface, the epoch of the policy its chains hold: each Set takes the next of
	// epochs, and Learn adds nothing under another.
	epoch  map[string]uint64
	epochs uint64
}

// ErrStalePolicy is Learn's error when the policy an answer was asked under is no longer the
// sandbox's.
var ErrStalePolicy = errors.New("the policy changed since the query was let through")

// NewFirewall returns the firewall of table name, deleting the table when an earlier daemon left one
// (with every sandbox's rules in it: the caller sets again those of the sandboxes it keeps). The table
// is made again with the first Set. pool is where the sandboxes' addresses come from, pool6 their IPv6
// ones (invalid: none, and IPv6 is dropped); ifPrefix begins the name of every sandbox's host
// interface.
func NewFirewall(name string, pool, pool6 netip.Prefix, ifPrefix string) (*Firewall, error) {
	conn, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	f := &Firewall{table: &nftables.Table{Name: name, Family: nftables.TableFamilyINet}, pool: pool.Masked(),
		gateway: pool.Masked().Addr().Next(), ifPrefix: ifPrefix, conn: conn}
	if pool6.IsValid() {
		f.pool6, f.gateway6 = pool6.Masked(), pool6.Masked().Addr().Next()
	}
	if err := f.deleteTable(); err != nil {
		return nil, err
	}
	return f, nil
}

// Ensure makes the table and its base chains unless they are there: from then on, whatever comes from
// an interface of the sandboxes' prefix whose chains are not in effect is dropped.
func (f *Firewall) Ensure() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ensure()
}

// ensure makes the table and its base chains unless they are there.
func (f *Firewall) ensure() error {
	if f.fwd != nil {
		return nil
	}
	conn := f.conn
	accept := nftables.ChainPolicyAccept
	t := conn.AddTable(f.table)
	fwd := conn.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	in := conn.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	post := conn.AddChain(&nftables.Chain{Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accept})
	sbx := []byte(f.ifPrefix) // a prefix match, as nft's "sbx*"
	conn.AddRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: join(ifname(expr.MetaKeyOIFNAME, sbx, true),
		ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept))})
	conn.AddRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: join(ifname(expr.MetaKeyOIFNAME, sbx, true), verdict(expr.VerdictDrop))})
	conn.AddRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: join(ifname(expr.MetaKeyIIFNAME, sbx, true), verdict(expr.VerdictDrop))})
	pools := []netip.Prefix{f.pool}
	if f.pool6.IsValid() {
		pools = append(pools, f.pool6)
	}
	for _, pool := range pools {
		conn.AddRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: join(daddr(pool, false), verdict(expr.VerdictDrop))})
	}
	if f.guard6 {
		conn.AddRule(f.guard6Rule(fwd))
	}
	conn.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: join(ifname(expr.MetaKeyIIFNAME, sbx, true), verdict(expr.VerdictDrop))})
	for _, pool := range pools {
		conn.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: join(saddr(pool, false), daddr(pool, true),
			ifname(expr.MetaKeyOIFNAME, sbx, false), []expr.Any{&expr.Masq{}})})
	}
	if err := f.flush(); err != nil {
		return fmt.Errorf("nftables: table %s: %w", f.table.Name, err)
	}
	f.fwd, f.in, f.set, f.epoch = fwd, in, map[string]bool{}, map[string]uint64{}
	f.v6 = map[string]bool{}
	f.learned, f.refused = map[string]map[netip.Addr]time.Time{}, map[string]map[netip.Addr]time.Time{}
	return nil
}

// guard6Rule drops forwarded IPv6 that neither comes from nor goes to an interface of any daemon's
// sandboxes ("sx", the prefix every provider's host ends begin with): at the end of the base forward
// chain, after each sandbox's chains have had their say.
func (f *Firewall) guard6Rule(fwd *nftables.Chain) *nftables.Rule {
	return &nftables.Rule{Table: f.table, Chain: fwd, Exprs: join(family(unix.NFPROTO_IPV6),
		ifname(expr.MetaKeyIIFNAME, []byte(sandboxIfPrefix), false), ifname(expr.MetaKeyOIFNAME, []byte(sandboxIfPrefix), false),
		verdict(expr.VerdictDrop))}
}

// sandboxIfPrefix begins the name of every daemon's sandbox interfaces (each its own ifPrefix).
const sandboxIfPrefix = "sx"

// GuardForwarding6 makes the base forward chain drop forwarded IPv6 that is no sandbox's, from now on
// and whenever the table is made again: the caller turns the host's global IPv6 forwarding on for the
// sandboxes, which would make it route IPv6 between its other interfaces too.
func (f *Firewall) GuardForwarding6() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.guard6 {
		return nil
	}
	f.guard6 = true
	if f.fwd == nil {
		return f.ensure()
	}
	f.conn.AddRule(f.guard6Rule(f.fwd))
	if err := f.flush(); err != nil {
		f.guard6 = false
		return fmt.Errorf("nftables: guard IPv6 forwarding: %w", err)
	}
	return nil
}

// Close deletes the table, with every sandbox's rules.
func (f *Firewall) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.deleteTable()
	f.conn.CloseLasting()
	return err
}

// flush sends the transaction built on f.conn.
func (f *Firewall) flush() error {
	err := f.conn.Flush()
	if err != nil {
		f.redial()
	}
	return err
}

// redial replaces f.conn, whose netlink socket stays open from one transaction to the next (a
// socket and its bind spared each time), after an error: one that failed part way may have left
// answers unread in it. Without a new one, the old one, closed, opens a socket for each use.
func (f *Firewall) redial() {
	f.conn.CloseLasting()
	if c, err := nftables.New(nftables.AsLasting()); err == nil {
		f.conn = c
	}
}

func (f *Firewall) deleteTable() error {
	f.fwd, f.in = nil, nil
	tables, err := f.conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		f.redial()
		return fmt.Errorf("nftables: list tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == f.table.Name {
			f.conn.DelTable(f.table)
			if err := f.flush(); err != nil {
				return fmt.Errorf("nftables: delete table %s: %w", f.table.Name, err)
			}
		}
	}
	return nil
}

// Addrs are a sandbox's addresses: IPv4, and IPv6 (invalid: none, and its IPv6 is dropped).
type Addrs struct {
	V4, V6 netip.Addr
}

// Set makes rules the policy of the sandbox on host interface ifname, whose addresses are self:
// its chains are made, or replaced in one transaction when they exist. It returns the policy's epoch,
// which Learn takes: an answer asked under an earlier policy opens nothing.
func (f *Firewall) Set(ifn string, self Addrs, rules Rules) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.setLocked(ifn, self, rules)
}

// jump adds to the transaction the base chains' jumps to ifn's chains.
func (f *Firewall) jump(ifn string) {
	me := []byte(ifn + "\x00")
	f.conn.InsertRule(&nftables.Rule{Table: f.table, Chain: f.fwd, UserData: []byte(ifn),
		Exprs: join(ifname(expr.MetaKeyIIFNAME, me, true), []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: "fwd-" + ifn}})})
	f.conn.InsertRule(&nftables.Rule{Table: f.table, Chain: f.in, UserData: []byte(ifn),
		Exprs: join(ifname(expr.MetaKeyIIFNAME, me, true), []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: "in-" + ifn}})})
}

// setLocked makes or replaces ifn's chains, and the base chains' jumps to them when they are new.
func (f *Firewall) setLocked(ifn string, self Addrs, rules Rules) (uint64, error) {
	if err := f.ensure(); err != nil {
		return 0, err
	}
	// IPv6 is the sandbox's when it has an address of the pool's: the firewall's pool6, which a
	// provider that has none leaves out.
	v6 := self.V6.IsValid() && f.pool6.IsValid() && f.pool6.Contains(self.V6)
	if f.set[ifn] && f.v6[ifn] != v6 {
		return 0, fmt.Errorf("nftables: %s has rules for another family", ifn)
	}
	fwd := &nftables.Chain{Name: "fwd-" + ifn, Table: f.table}
	in := &nftables.Chain{Name: "in-" + ifn, Table: f.table}
	rej := &nftables.Chain{Name: "rej-" + ifn, Table: f.table}
	allowed, denials := learnedSet(f.table, ifn, false), denialSet(f.table, ifn, false)
	sets := []*nftables.Set{allowed, denials}
	if v6 {
		sets = append(sets, learnedSet(f.table, ifn, true), denialSet(f.table, ifn, true))
	}
	if f.set[ifn] {
		// What was learned under the old rules is learned again under the new ones; the denials stay.
		f.conn.FlushChain(fwd)
		f.conn.FlushChain(in)
		f.conn.FlushChain(rej)
		for _, s := range sets {
			if !s.Dynamic {
				f.conn.FlushSet(s)
			}
		}
		delete(f.learned, ifn)
	} else {
		f.conn.AddChain(fwd)
		f.conn.AddChain(in)
		f.conn.AddChain(rej)
		for _, s := range sets {
			if err := f.conn.AddSet(s, nil); err != nil {
				return 0, fmt.Errorf("nftables: %w", err)
			}
		}
	}
	if !f.set[ifn] {
		f.jump(ifn) // after the chains in the transaction: inserted at the base chains' heads
	}
	add := func(c *nftables.Chain, e ...[]expr.Any) {
		f.conn.AddRule(&nftables.Rule{Table: f.table, Chain: c, Exprs: join(e...)})
	}
	// The families the chains pass: IPv4, and IPv6 when the sandbox has it. Their rules only.
	fams := []bool{false}
	if v6 {
		fams = append(fams, true)
	}
	ofFams := func(prs []netip.Prefix) []netip.Prefix {
		var out []netip.Prefix
		for _, pr := range prs {
			if pr.Addr().Is4() || v6 {
				out = append(out, pr)
			}
		}
		return out
	}
	// Every refusal goes to rej-X: the destination is recorded in the denials' set, its time of
	// last refusal told by the element's timeout, then the packet is counted and refused. The record
	// is a rule of its own: when the set is full it fails, and the refusal that follows holds anyway.
	for _, is6 := range fams {
		set := denialSet(f.table, ifn, is6)
		off, n, fam := uint32(16), uint32(4), byte(unix.NFPROTO_IPV4)
		if is6 {
			off, n, fam = 24, 16, unix.NFPROTO_IPV6
		}
		add(rej, family(fam), []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
			&expr.Dynset{SrcRegKey: 1, SetName: set.Name, SetID: set.ID, Operation: unix.NFT_DYNSET_OP_UPDATE, Timeout: denialMemory},
		})
	}
	add(rej, []expr.Any{&expr.Counter{}, &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}})
	reject := func() []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictGoto, Chain: rej.Name}} }
	selves := []netip.Prefix{netip.PrefixFrom(self.V4, 32)}
	pools := []netip.Prefix{f.pool}
	gateways := []netip.Addr{f.gateway}
	if v6 {
		selves = append(selves, netip.PrefixFrom(self.V6, 128))
		pools = append(pools, f.pool6)
		gateways = append(gateways, f.gateway6)
	}
	for _, c := range []*nftables.Chain{fwd, in} {
		if !v6 {
			add(c, notIPv4(), verdict(expr.VerdictDrop)) // IPv6: denied
		} else if c == in {
			// Neighbour discovery with the host's end of the link (hop limit 255: from the link itself),
			// from the sandbox's address, its link-local one or none (duplicate detection).
			add(c, neighbourDiscovery(), verdict(expr.VerdictAccept))
		}
		for _, pr := range selves {
			add(c, saddr(pr, true), verdict(expr.VerdictDrop)) // a forged source, or a link-local one
		}
		if v6 && c == in {
			// Multicast to the link (listener reports and the like): dropped quietly, no denial.
			add(c, daddr(multicast6, false), verdict(expr.VerdictDrop))
		}
		add(c, ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept))
		if c == in {
			// The daemon's resolver on the gateway: the one server a sandbox's DNS goes to.
			// At most dnsRate packets a second (a burst of dnsBurst) from each sandbox and family:
			// every query is the daemon's work, an upstream query and an nftables transaction; past
			// it, refused.
			for _, gw := range gateways {
				if gw.Is6() && !f.resolver6 {
					continue
				}
				for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
					add(c, daddr(netip.PrefixFrom(gw, gw.BitLen()), false), port(proto, 53),
						[]expr.Any{&expr.Limit{Type: expr.LimitTypePkts, Rate: dnsRate, Unit: expr.LimitTimeSecond, Burst: dnsBurst}},
						verdict(expr.VerdictAccept))
				}
			}
		} else {
			// DNS (and DNS over TLS) to anything else is refused, whatever the rules.
			for _, pp := range []struct {
				proto byte
				port  uint16
			}{{unix.IPPROTO_UDP, 53}, {unix.IPPROTO_TCP, 53}, {unix.IPPROTO_TCP, 853}, {unix.IPPROTO_UDP, 853}} {
				add(c, port(pp.proto, pp.port), reject())
			}
		}
		for _, pr := range pools {
			add(c, daddr(pr, false), reject()) // another sandbox, whatever the rules
		}
		for _, pr := range ofFams(rules.Deny) {
			add(c, daddr(pr, false), reject())
		}
		for _, pr := range ofFams(rules.Allow) {
			if Explicit(pr) {
				add(c, daddr(pr, false), counted(expr.VerdictAccept))
			}
		}
	}
	// Beyond this point only the forward chain: whatever the input chain has not accepted is the host.
	add(in, reject())
	refused := append([]netip.Prefix{linkLocal}, never...)
	if v6 {
		refused = append(refused, never6...)
	}
	for _, pr := range refused {
		add(fwd, daddr(pr, false), reject())
	}
	var other []netip.Prefix // the allow rules not yet written
	for _, pr := range ofFams(rules.Allow) {
		switch {
		case Explicit(pr):
		case pr.Addr().Is6() && uniqueLocal6.Bits() <= pr.Bits() && uniqueLocal6.Contains(pr.Addr()):
			// Unique local addresses are opened by a rule inside fc00::/7 only (never by ::/0, nor
			// by an answer).
			add(fwd, daddr(pr, false), counted(expr.VerdictAccept))
		default:
			other = append(other, pr)
		}
	}
	if v6 {
		add(fwd, daddr(uniqueLocal6, false), reject())
	}
	for _, is6 := range fams {
		add(fwd, daddrIn(learnedSet(f.table, ifn, is6)), counted(expr.VerdictAccept)) // addresses of allowed names
	}
	for _, pr := range other {
		add(fwd, daddr(pr, false), counted(expr.VerdictAccept))
	}
	if rules.Egress {
		add(fwd, counted(expr.VerdictAccept))
	} else {
		add(fwd, reject())
	}
	// A failed transaction may have flushed nothing: the epoch moves on anyway, so that no answer asked
	// under the policy being replaced is learned.
	f.epochs++
	f.epoch[ifn] = f.epochs
	if err := f.flush(); err != nil {
		return 0, fmt.Errorf("nftables: rules of %s: %w", ifn, err)
	}
	f.set[ifn] = true
	f.v6[ifn] = v6
	return f.epochs, nil
}

// learnedSet is the set of the addresses of the family (IPv6 with is6) the sandbox on ifn learned
// from answers for allowed names; denialSet that of its refused destinations.
func learnedSet(t *nftables.Table, ifn string, is6 bool) *nftables.Set {
	if is6 {
		return &nftables.Set{Table: t, Name: "a6-" + ifn, KeyType: nftables.TypeIP6Addr, HasTimeout: true}
	}
	return &nftables.Set{Table: t, Name: "a-" + ifn, KeyType: nftables.TypeIPAddr, HasTimeout: true}
}

func denialSet(t *nftables.Table, ifn string, is6 bool) *nftables.Set {
	s := &nftables.Set{Table: t, Name: "x-" + ifn, KeyType: nftables.TypeIPAddr, HasTimeout: true,
		Dynamic: true, Timeout: denialMemory, Size: maxDenials}
	if is6 {
		s.Name, s.KeyType = "x6-"+ifn, nftables.TypeIP6Addr
	}
	return s
}

// Remove deletes the rules of the sandbox on ifname; none is no error.
func (f *Firewall) Remove(ifn string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fwd == nil || !f.set[ifn] {
		return nil
	}
	rules, err := f.jumps(ifn)
	if err != nil || len(rules) == 0 {
		return err
	}
	for _, r := range rules {
		if err := f.conn.DelRule(r); err != nil {
			return err
		}
	}
	f.conn.FlushChain(&nftables.Chain{Name: "fwd-" + ifn, Table: f.table})
	f.conn.FlushChain(&nftables.Chain{Name: "in-" + ifn, Table: f.table})
	f.conn.DelChain(&nftables.Chain{Name: "fwd-" + ifn, Table: f.table})
	f.conn.DelChain(&nftables.Chain{Name: "in-" + ifn, Table: f.table})
	f.conn.FlushChain(&nftables.Chain{Name: "rej-" + ifn, Table: f.table})
	f.conn.DelChain(&nftables.Chain{Name: "rej-" + ifn, Table: f.table})
	f.conn.DelSet(&nftables.Set{Table: f.table, Name: "a-" + ifn})
	f.conn.DelSet(&nftables.Set{Table: f.table, Name: "x-" + ifn})
	if f.v6[ifn] {
		f.conn.DelSet(&nftables.Set{Table: f.table, Name: "a6-" + ifn})
		f.conn.DelSet(&nftables.Set{Table: f.table, Name: "x6-" + ifn})
	}
	if err := f.flush(); err != nil {
		return fmt.Errorf("nftables: remove the rules of %s: %w", ifn, err)
	}
	delete(f.set, ifn)
	delete(f.learned, ifn)
	delete(f.refused, ifn)
	delete(f.epoch, ifn)
	delete(f.v6, ifn)
	return nil
}

// The rate of packets to the resolver each sandbox may send.
const (
	dnsRate  = 200
	dnsBurst = 400
)

// How long and how many refused destinations each sandbox's denials' set remembers.
const (
	denialMemory = time.Hour
	maxDenials   = 1024
)

// Denial is a destination refused to a sandbox, and when it last was.
type Denial struct {
	Addr netip.Addr
	At   time.Time
}

// Status is what the firewall counted for one sandbox: the packets its rules accepted (the first of
// each connection: the rest pass as established) and refused, and its recent refusals, newest first.
type Status struct {
	Allowed, Denied uint64
	Denials         []Denial
}

// Status reads the counters and the denials of the sandbox on ifn.
func (f *Firewall) Status(ifn string) (Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var st Status
	if !f.set[ifn] {
		return st, fmt.Errorf("nftables: no rules for %s", ifn)
	}
	for _, name := range []string{"fwd-", "in-", "rej-"} {
		rules, err := f.conn.GetRules(f.table, &nftables.Chain{Name: name + ifn, Table: f.table})
		if err != nil {
			f.redial()
			return st, fmt.Errorf("nftables: %w", err)
		}
		for _, r := range rules {
			for i, e := range r.Exprs {
				c, ok := e.(*expr.Counter)
				if !ok || i+1 >= len(r.Exprs) {
					continue
				}
				switch v := r.Exprs[i+1].(type) {
				case *expr.Verdict:
					if v.Kind == expr.VerdictAccept {
						st.Allowed += c.Packets
					}
				case *expr.Reject:
					st.Denied += c.Packets
				}
			}
		}
	}
	var els []nftables.SetElement
	for _, is6 := range []bool{false, true} {
		if is6 && !f.v6[ifn] {
			continue
		}
		some, err := f.conn.GetSetElements(denialSet(f.table, ifn, is6))
		if err != nil {
			f.redial()
			return st, fmt.Errorf("nftables: %w", err)
		}
		els = append(els, some...)
	}
	now := time.Now()
	told := f.refused[ifn]
	next := make(map[netip.Addr]time.Time, len(els))
	for _, el := range els {
		a, ok := netip.AddrFromSlice(el.Key)
		if !ok {
			continue
		}
		at := now.Add(el.Expires - denialMemory).Truncate(time.Millisecond)
		if prev, ok := told[a]; ok && at.Sub(prev).Abs() < time.Second {
			at = prev
		}
		next[a] = at
		st.Denials = append(st.Denials, Denial{Addr: a, At: at})
	}
	f.refused[ifn] = next
	slices.SortFunc(st.Denials, func(a, b Denial) int { return b.At.Compare(a.At) })
	return st, nil
}

// Learn allows the sandbox on ifn the addresses addrs for ttl: the answer for a name an allow rule of
// the policy of epoch (Set's) names. An address known already is kept for the longer of the two. The
// learned addresses come after the rules that keep the host, link-local addresses, the other
// sandboxes and the deny rules' destinations out (over IPv6 also unique local addresses, NAT64 and
// IPv4-mapped ones): an answer opens none of them. IPv6 addresses are learned (into a6-X) only for a
// sandbox with IPv6, and an IPv4-mapped one never. When the sandbox's policy is no longer epoch's,
// nothing is learned: ErrStalePolicy.
func (f *Firewall) Learn(ifn string, epoch uint64, addrs []netip.Addr, ttl time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.set[ifn] {
		return fmt.Errorf("nftables: no rules in effect for %s", ifn)
	}
	if f.epoch[ifn] != epoch {
		return fmt.Errorf("nftables: %s: %w", ifn, ErrStalePolicy)
	}
	known := f.learned[ifn]
	if known == nil {
		known = map[netip.Addr]time.Time{}
		f.learned[ifn] = known
	}
	now := time.Now()
	until := now.Add(ttl)
	fresh, renew := map[bool][]nftables.SetElement{}, map[bool][]nftables.SetElement{}
	for _, a := range addrs {
		if !a.Is4() && !(a.Is6() && !a.Is4In6() && f.v6[ifn]) {
			continue
		}
		el := nftables.SetElement{Key: a.AsSlice(), Timeout: ttl}
		switch old, ok := known[a]; {
		case !ok || now.After(old):
			fresh[a.Is6()] = append(fresh[a.Is6()], el)
		case until.After(old.Add(time.Second)):
			renew[a.Is6()] = append(renew[a.Is6()], el)
		default:
			continue
		}
		known[a] = until
	}
	for _, is6 := range []bool{false, true} {
		set := learnedSet(f.table, ifn, is6)
		if len(renew[is6]) > 0 {
			// An element's timeout is its own: the longer one replaces it.
			if err := f.conn.SetDeleteElements(set, renew[is6]); err != nil {
				return err
			}
			if err := f.flush(); err != nil {
				return fmt.Errorf("nftables: renew in %s: %w", set.Name, err)
			}
		}
		if len(fresh[is6])+len(renew[is6]) == 0 {
			continue
		}
		if err := f.conn.SetAddElements(set, append(fresh[is6], renew[is6]...)); err != nil {
			return err
		}
		if err := f.flush(); err != nil {
			return fmt.Errorf("nftables: learn in %s: %w", set.Name, err)
		}
	}
	return nil
}

// jumps returns the base chains' rules that jump to ifn's chains.
func (f *Firewall) jumps(ifn string) ([]*nftables.Rule, error) {
	var out []*nftables.Rule
	for _, c := range []*nftables.Chain{f.fwd, f.in} {
		rules, err := f.conn.GetRules(f.table, c)
		if err != nil {
			f.redial()
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return nil, fmt.Errorf("nftables: %w", err)
		}
		for _, r := range rules {
			if bytes.Equal(r.UserData, []byte(ifn)) {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// port matches the transport protocol proto and its destination port.
func port(proto byte, p uint16) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(p)},
	}
}

// daddrIn matches a destination in set, of the set's family.
func daddrIn(set *nftables.Set) []expr.Any {
	off, n, fam := uint32(16), uint32(4), byte(unix.NFPROTO_IPV4)
	if set.KeyType == nftables.TypeIP6Addr {
		off, n, fam = 24, 16, unix.NFPROTO_IPV6
	}
	return join(family(fam), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
	})
}

func join(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// ifname compares the input or output interface's name with name (a prefix when it has no NUL).
func ifname(key expr.MetaKey, name []byte, eq bool) []expr.Any {
	op := expr.CmpOpEq
	if !eq {
		op = expr.CmpOpNeq
	}
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: op, Register: 1, Data: name}}
}

// family matches the packets of one family (unix.NFPROTO_IPV4 or NFPROTO_IPV6).
func family(fam byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam}}}
}

func notIPv4() []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}}}
}

// saddr matches a packet of pr's family whose source address is inside pr, or outside it with not;
// daddr its destination address. A packet of the other family never matches.
func saddr(pr netip.Prefix, not bool) []expr.Any { return addr(true, pr, not) }
func daddr(pr netip.Prefix, not bool) []expr.Any { return addr(false, pr, not) }

func addr(src bool, pr netip.Prefix, not bool) []expr.Any {
	off, fam := uint32(16), byte(unix.NFPROTO_IPV4) // the IPv4 header's destination; its source at 12
	if src {
		off = 12
	}
	if pr.Addr().Is6() {
		off, fam = 24, unix.NFPROTO_IPV6 // the IPv6 header's destination; its source at 8
		if src {
			off = 8
		}
	}
	a := pr.Masked().Addr().AsSlice()
	n := uint32(len(a))
	op := expr.CmpOpEq
	if not {
		op = expr.CmpOpNeq
	}
	out := join(family(fam), []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}})
	if pr.Bits() < pr.Addr().BitLen() {
		out = append(out, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n,
			Mask: net.CIDRMask(pr.Bits(), pr.Addr().BitLen()), Xor: make([]byte, n)})
	}
	return append(out, &expr.Cmp{Op: op, Register: 1, Data: a})
}

// neighbourDiscovery matches ICMPv6 router solicitations, neighbour solicitations and advertisements
// (and router advertisements, which the host's end of a link does not accept) with a hop limit of
// 255: sent on the link itself.
func neighbourDiscovery() []expr.Any {
	return join(family(unix.NFPROTO_IPV6), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 7, Len: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{255}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_ICMPV6}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: []byte{133}, ToData: []byte{136}},
	})
}

func ctState(bits uint32) []expr.Any {
	b := binaryutil.NativeEndian.PutUint32(bits)
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: b[:], Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
	}
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

// counted is a verdict whose packets are counted.
func counted(k expr.VerdictKind) []expr.Any {
	return []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: k}}
}
