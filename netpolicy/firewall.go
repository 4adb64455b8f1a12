package netpolicy

import (
	"bytes"
	"errors"
	"fmt"
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
//	  the pool through an interface not a sandbox's dropped (the replies to a sandbox whose link is
//	  gone never take the host's default route).
//	input (filter, priority 0): per sandbox, iifname X jump in-X; anything else from one dropped.
//	postrouting (nat, priority 100): the pool's addresses masqueraded behind the outgoing interface.
//
// fwd-X and in-X hold sandbox X's policy (rules); a policy change replaces them in one transaction, so
// every packet meets the old rules or the new ones. Established connections keep going. Each begins
// with a gate: what comes from an interface not in the set "open" is dropped. Chains made ahead
// (Hold) are in place with their jumps, their interface not in the set: Open adds it, a transaction
// of one set element. (A transaction that adds a jump has the kernel check the whole table's chains
// for loops, which with a few dozen sandboxes takes milliseconds; one that adds an element to a set
// without verdicts checks nothing.)
type Firewall struct {
	table    *nftables.Table
	pool     netip.Prefix
	gateway  netip.Addr // the pool's first address: the host's end of every link, and the resolver's
	ifPrefix string

	mu   sync.Mutex
	conn *nftables.Conn
	fwd  *nftables.Chain
	in   *nftables.Chain
	open *nftables.Set   // the interfaces whose chains are in effect (the gate)
	set  map[string]bool // the interfaces with chains
	held map[string]bool // those of them whose chains no base chain jumps to yet (Hold)
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
// is made again with the first Set. pool is where the sandboxes' addresses come from; ifPrefix begins
// the name of every sandbox's host interface.
func NewFirewall(name string, pool netip.Prefix, ifPrefix string) (*Firewall, error) {
	conn, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	f := &Firewall{table: &nftables.Table{Name: name, Family: nftables.TableFamilyINet}, pool: pool.Masked(),
		gateway: pool.Masked().Addr().Next(), ifPrefix: ifPrefix, conn: conn}
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
	open := &nftables.Set{Table: t, Name: "open", KeyType: nftables.TypeIFName}
	if err := conn.AddSet(open, nil); err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	sbx := []byte(f.ifPrefix) // a prefix match, as nft's "sbx*"
	conn.AddRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: join(ifname(expr.MetaKeyOIFNAME, sbx, true),
		ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept))})
	conn.AddRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: join(ifname(expr.MetaKeyOIFNAME, sbx, true), verdict(expr.VerdictDrop))})
	conn.AddRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: join(ifname(expr.MetaKeyIIFNAME, sbx, true), verdict(expr.VerdictDrop))})
	conn.AddRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: join(ipv4(), addr(16, f.pool, false), verdict(expr.VerdictDrop))})
	conn.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: join(ifname(expr.MetaKeyIIFNAME, sbx, true), verdict(expr.VerdictDrop))})
	conn.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: join(ipv4(), addr(12, f.pool, false), addr(16, f.pool, true),
		ifname(expr.MetaKeyOIFNAME, sbx, false), []expr.Any{&expr.Masq{}})})
	if err := f.flush(); err != nil {
		return fmt.Errorf("nftables: table %s: %w", f.table.Name, err)
	}
	f.fwd, f.in, f.open, f.set, f.held, f.epoch = fwd, in, open, map[string]bool{}, map[string]bool{}, map[string]uint64{}
	f.learned, f.refused = map[string]map[netip.Addr]time.Time{}, map[string]map[netip.Addr]time.Time{}
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
	f.fwd, f.in, f.open = nil, nil, nil
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

// Set makes rules the policy of the sandbox on host interface ifname, whose address is sandboxAddr:
// its chains are made, or replaced in one transaction when they exist. It returns the policy's epoch,
// which Learn takes: an answer asked under an earlier policy opens nothing.
func (f *Firewall) Set(ifn string, sandboxAddr netip.Addr, rules Rules) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.setLocked(ifn, sandboxAddr, rules, true)
}

// Hold makes the chains of the sandbox on ifname, whose address is sandboxAddr, holding rules, with
// their gate shut: whatever comes from ifname is dropped at their first rule, and only replies to a
// connection tracked reach it. Open then makes them its policy in a transaction of one set element;
// Set replaces them and opens them in one. The epoch returned is the rules' (Set's).
func (f *Firewall) Hold(ifn string, sandboxAddr netip.Addr, rules Rules) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.set[ifn] {
		return 0, fmt.Errorf("nftables: %s has rules already", ifn)
	}
	return f.setLocked(ifn, sandboxAddr, rules, false)
}

// Open makes the rules Hold made for ifname its policy: its gate opens, in one transaction. It
// returns their epoch.
func (f *Firewall) Open(ifn string) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.set[ifn] || !f.held[ifn] {
		return 0, fmt.Errorf("nftables: %s has no rules held", ifn)
	}
	if err := f.conn.SetAddElements(f.open, []nftables.SetElement{{Key: ifnameKey(ifn)}}); err != nil {
		return 0, fmt.Errorf("nftables: %w", err)
	}
	if err := f.flush(); err != nil {
		return 0, fmt.Errorf("nftables: open the rules of %s: %w", ifn, err)
	}
	delete(f.held, ifn)
	return f.epoch[ifn], nil
}

// ifnameKey is ifn as a key of a set of interface names.
func ifnameKey(ifn string) []byte {
	k := make([]byte, nftables.TypeIFName.Bytes)
	copy(k, ifn)
	return k
}

// jump adds to the transaction the base chains' jumps to ifn's chains.
func (f *Firewall) jump(ifn string) {
	me := []byte(ifn + "\x00")
	f.conn.InsertRule(&nftables.Rule{Table: f.table, Chain: f.fwd, UserData: []byte(ifn),
		Exprs: join(ifname(expr.MetaKeyIIFNAME, me, true), []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: "fwd-" + ifn}})})
	f.conn.InsertRule(&nftables.Rule{Table: f.table, Chain: f.in, UserData: []byte(ifn),
		Exprs: join(ifname(expr.MetaKeyIIFNAME, me, true), []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: "in-" + ifn}})})
}

// setLocked makes or replaces ifn's chains, the base chains' jumps to them with new ones; with open,
// their gate opens (from the same transaction on, when it was shut).
func (f *Firewall) setLocked(ifn string, sandboxAddr netip.Addr, rules Rules, open bool) (uint64, error) {
	if err := f.ensure(); err != nil {
		return 0, err
	}
	fwd := &nftables.Chain{Name: "fwd-" + ifn, Table: f.table}
	in := &nftables.Chain{Name: "in-" + ifn, Table: f.table}
	rej := &nftables.Chain{Name: "rej-" + ifn, Table: f.table}
	allowed := &nftables.Set{Table: f.table, Name: "a-" + ifn, KeyType: nftables.TypeIPAddr, HasTimeout: true}
	denials := &nftables.Set{Table: f.table, Name: "x-" + ifn, KeyType: nftables.TypeIPAddr, HasTimeout: true,
		Dynamic: true, Timeout: denialMemory, Size: maxDenials}
	if f.set[ifn] {
		// What was learned under the old rules is learned again under the new ones; the denials stay.
		f.conn.FlushChain(fwd)
		f.conn.FlushChain(in)
		f.conn.FlushChain(rej)
		f.conn.FlushSet(allowed)
		delete(f.learned, ifn)
	} else {
		f.conn.AddChain(fwd)
		f.conn.AddChain(in)
		f.conn.AddChain(rej)
		if err := f.conn.AddSet(allowed, nil); err != nil {
			return 0, fmt.Errorf("nftables: %w", err)
		}
		if err := f.conn.AddSet(denials, nil); err != nil {
			return 0, fmt.Errorf("nftables: %w", err)
		}
	}
	if !f.set[ifn] {
		f.jump(ifn) // after the chains in the transaction: inserted at the base chains' heads
	}
	opens := open && (!f.set[ifn] || f.held[ifn])
	if opens {
		if err := f.conn.SetAddElements(f.open, []nftables.SetElement{{Key: ifnameKey(ifn)}}); err != nil {
			return 0, fmt.Errorf("nftables: %w", err)
		}
	}
	add := func(c *nftables.Chain, e ...[]expr.Any) {
		f.conn.AddRule(&nftables.Rule{Table: f.table, Chain: c, Exprs: join(e...)})
	}
	// Every refusal goes to rej-X: the destination is recorded in the denials' set, its time of
	// last refusal told by the element's timeout, then the packet is counted and refused. The record
	// is a rule of its own: when the set is full it fails, and the refusal that follows holds anyway.
	add(rej, []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Dynset{SrcRegKey: 1, SetName: denials.Name, SetID: denials.ID, Operation: unix.NFT_DYNSET_OP_UPDATE, Timeout: denialMemory},
	})
	add(rej, []expr.Any{&expr.Counter{}, &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}})
	reject := func() []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictGoto, Chain: rej.Name}} }
	self := netip.PrefixFrom(sandboxAddr, 32)
	for _, c := range []*nftables.Chain{fwd, in} {
		add(c, []expr.Any{&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}, // the gate
			&expr.Lookup{SourceRegister: 1, SetName: f.open.Name, SetID: f.open.ID, Invert: true}}, verdict(expr.VerdictDrop))
		add(c, notIPv4(), verdict(expr.VerdictDrop))            // IPv6 and the rest: denied
		add(c, addr(12, self, true), verdict(expr.VerdictDrop)) // a forged source
		add(c, ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept))
		if c == in {
			// The daemon's resolver on the gateway: the one server a sandbox's DNS goes to.
			gw := netip.PrefixFrom(f.gateway, 32)
			// At most dnsRate packets a second (a burst of dnsBurst) from each sandbox: every query is
			// the daemon's work, an upstream query and an nftables transaction; past it, refused.
			for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
				add(c, addr(16, gw, false), port(proto, 53),
					[]expr.Any{&expr.Limit{Type: expr.LimitTypePkts, Rate: dnsRate, Unit: expr.LimitTimeSecond, Burst: dnsBurst}},
					verdict(expr.VerdictAccept))
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
		add(c, addr(16, f.pool, false), reject()) // another sandbox, whatever the rules
		for _, pr := range v4(rules.Deny) {
			add(c, addr(16, pr, false), reject())
		}
		for _, pr := range v4(rules.Allow) {
			if Explicit(pr) {
				add(c, addr(16, pr, false), counted(expr.VerdictAccept))
			}
		}
	}
	// Beyond this point only the forward chain: whatever the input chain has not accepted is the host.
	add(in, reject())
	for _, pr := range append([]netip.Prefix{linkLocal}, never...) {
		add(fwd, addr(16, pr, false), reject())
	}
	add(fwd, daddrIn(allowed), counted(expr.VerdictAccept)) // addresses of allowed names
	for _, pr := range v4(rules.Allow) {
		if !Explicit(pr) {
			add(fwd, addr(16, pr, false), counted(expr.VerdictAccept))
		}
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
	if !f.set[ifn] && !open {
		f.held[ifn] = true
	} else if opens {
		delete(f.held, ifn)
	}
	f.set[ifn] = true
	return f.epochs, nil
}

// v4 are the IPv4 rules of prs. The chains hold no others: IPv6 is dropped before any rule, and a
// provider refuses an IPv6 allow rule it cannot keep (Rules.AllowsIPv6).
func v4(prs []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, pr := range prs {
		if pr.Addr().Is4() {
			out = append(out, pr)
		}
	}
	return out
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
	if !f.held[ifn] {
		if err := f.conn.SetDeleteElements(f.open, []nftables.SetElement{{Key: ifnameKey(ifn)}}); err != nil {
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
	if err := f.flush(); err != nil {
		return fmt.Errorf("nftables: remove the rules of %s: %w", ifn, err)
	}
	delete(f.set, ifn)
	delete(f.held, ifn)
	delete(f.learned, ifn)
	delete(f.refused, ifn)
	delete(f.epoch, ifn)
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
	els, err := f.conn.GetSetElements(&nftables.Set{Table: f.table, Name: "x-" + ifn, KeyType: nftables.TypeIPAddr})
	if err != nil {
		f.redial()
		return st, fmt.Errorf("nftables: %w", err)
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
// sandboxes and the deny rules' destinations out: an answer opens none of them. When the sandbox's
// policy is no longer epoch's, nothing is learned: ErrStalePolicy.
func (f *Firewall) Learn(ifn string, epoch uint64, addrs []netip.Addr, ttl time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.set[ifn] || f.held[ifn] {
		return fmt.Errorf("nftables: no rules in effect for %s", ifn)
	}
	if f.epoch[ifn] != epoch {
		return fmt.Errorf("nftables: %s: %w", ifn, ErrStalePolicy)
	}
	name := "a-" + ifn
	set := &nftables.Set{Table: f.table, Name: name, KeyType: nftables.TypeIPAddr, HasTimeout: true}
	known := f.learned[ifn]
	if known == nil {
		known = map[netip.Addr]time.Time{}
		f.learned[ifn] = known
	}
	now := time.Now()
	until := now.Add(ttl)
	var fresh, renew []nftables.SetElement
	for _, a := range addrs {
		if !a.Is4() {
			continue
		}
		el := nftables.SetElement{Key: a.AsSlice(), Timeout: ttl}
		switch old, ok := known[a]; {
		case !ok || now.After(old):
			fresh = append(fresh, el)
		case until.After(old.Add(time.Second)):
			renew = append(renew, el)
		default:
			continue
		}
		known[a] = until
	}
	if len(renew) > 0 {
		// An element's timeout is its own: the longer one replaces it.
		if err := f.conn.SetDeleteElements(set, renew); err != nil {
			return err
		}
		if err := f.flush(); err != nil {
			return fmt.Errorf("nftables: renew in %s: %w", name, err)
		}
	}
	if len(fresh)+len(renew) == 0 {
		return nil
	}
	if err := f.conn.SetAddElements(set, append(fresh, renew...)); err != nil {
		return err
	}
	if err := f.flush(); err != nil {
		return fmt.Errorf("nftables: learn in %s: %w", name, err)
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

// daddrIn matches an IPv4 destination in set.
func daddrIn(set *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
	}
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

func ipv4() []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}}}
}

func notIPv4() []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}}}
}

// addr matches the IPv4 header's source (offset 12) or destination (16) address inside pr, or
// outside it with not.
func addr(offset uint32, pr netip.Prefix, not bool) []expr.Any {
	mask := net4Mask(pr.Bits())
	net := pr.Masked().Addr().As4()
	op := expr.CmpOpEq
	if not {
		op = expr.CmpOpNeq
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask[:], Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: op, Register: 1, Data: net[:]},
	}
}

func net4Mask(bits int) [4]byte {
	var m [4]byte
	for i := range 4 {
		switch {
		case bits >= 8:
			m[i] = 0xff
		case bits > 0:
			m[i] = byte(0xff << (8 - bits))
		}
		bits -= 8
	}
	return m
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
