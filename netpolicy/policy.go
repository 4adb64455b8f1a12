// Package netpolicy is a sandbox's egress policy (the value of spec.extensions["sandboxd.network"]) and
// the nftables rules that enforce it on the host (firewall.go).
//
// A policy says whether egress is allowed by default and lists destinations to allow and to deny. Deny
// beats allow. Whatever it says, a sandbox never reaches another sandbox, and it reaches the host
// (its own addresses, the daemon) or a link-local address (169.254.0.0/16, where clouds serve their
// metadata) only through an allow rule that names it: a single address (/32) or a range inside
// 169.254.0.0/16 (fe80::/10). A rule may name IPv6 destinations; IPv6 is denied unless the provider
// gives its sandboxes IPv6, and one that does not refuses a policy allowing an IPv6 destination
// (AllowsIPv6).
package netpolicy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/sandboxd/sandbox"
)

// ExtensionKey is the spec.extensions key that holds a sandbox's policy.
const ExtensionKey = "sandboxd.network"

// Egress defaults.
const (
	EgressDeny  = "deny"
	EgressAllow = "allow"
)

// maxRules bounds each list of a policy: every entry is one rule on the host's packet path.
const maxRules = 256

// Policy is a sandbox's egress policy as written in its spec.
type Policy struct {
	Egress string   `json:"egress,omitempty"` // EgressDeny or EgressAllow; empty: the daemon's default
	Allow  []string `json:"allow,omitempty"`  // CIDRs, addresses or names (Rules.AllowNames)
	Deny   []string `json:"deny,omitempty"`
}

// Rules is a checked policy, ready for the firewall.
type Rules struct {
	Egress bool // egress to what no rule names is allowed
	Allow  []netip.Prefix
	Deny   []netip.Prefix
	// AllowNames and DenyNames are the entries that are names, not addresses: "example.com" is that
	// name alone, "*.example.com" its subdomains (not itself). The daemon's resolver (Forwarder)
	// answers a sandbox's queries and makes the firewall allow (or deny) the addresses of an answer
	// for a name they name, for its TTL.
	AllowNames []string `json:",omitempty"`
	DenyNames  []string `json:",omitempty"`
}

// linkLocal is where clouds serve instance metadata; reached only through a rule inside it.
var linkLocal = netip.MustParsePrefix("169.254.0.0/16")

// linkLocal6 is IPv6's link-local range, opened, as linkLocal is, only by a rule inside it.
var linkLocal6 = netip.MustParsePrefix("fe80::/10")

// never are destinations no rule opens: "this network", loopback (martian off the host's own), and
// multicast, reserved and broadcast.
var never = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("224.0.0.0/3"),
}

// never6 are IPv6's: link-local (fe80::/10, with the clouds' fe80::a9fe:a9fe) and the metadata
// address fd00:ec2::254, both opened only by a rule naming them (Explicit) as 169.254.0.0/16 is;
// loopback and the unspecified address; multicast; and the ranges that translate to IPv4 (NAT64's
// 64:ff9b::/96 and 64:ff9b:1::/48, IPv4-mapped ::ffff:0:0/96), so that no translation reaches an IPv4
// address the IPv4 rules refuse.
var never6 = []netip.Prefix{
	linkLocal6,
	netip.MustParsePrefix("fd00:ec2::254/128"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("::/128"),
	multicast6,
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("::ffff:0:0/96"),
}

// multicast6 is IPv6's multicast.
var multicast6 = netip.MustParsePrefix("ff00::/8")

// uniqueLocal6 are IPv6's private addresses (ULA), where the sandboxes' pool is too: opened only by a
// rule inside it, never by a wider one (::/0) nor by a name's answer.
var uniqueLocal6 = netip.MustParsePrefix("fc00::/7")

// Explicit reports whether an allow rule for pr names its destination explicitly enough to open the
// host or a link-local address: one address, or a range inside 169.254.0.0/16 (fe80::/10).
func Explicit(pr netip.Prefix) bool {
	for _, ll := range []netip.Prefix{linkLocal, linkLocal6} {
		if ll.Bits() <= pr.Bits() && ll.Contains(pr.Addr()) {
			return true
		}
	}
	return pr.IsSingleIP()
}

// AllowsIPv6 returns the first allow rule for IPv6 destinations; false when there is none. A provider
// whose sandboxes have no IPv6 (no IPv6 pool) cannot keep such a rule, and refuses it
// (ErrUnsupportedCapability) rather than let it deny silently. A deny rule for IPv6 needs nothing
// there: IPv6 is denied anyway.
func (r Rules) AllowsIPv6() (netip.Prefix, bool) {
	for _, pr := range r.Allow {
		if pr.Addr().Is6() {
			return pr, true
		}
	}
	return netip.Prefix{}, false
}

// Needs reports whether rules need a network at all: a sandbox whose egress is denied and which
// allows nothing keeps the loopback-only path.
func (r Rules) Needs() bool { return r.Egress || len(r.Allow) > 0 || len(r.AllowNames) > 0 }

// Equal reports whether r and o are the same rules, in the same order.
func (r Rules) Equal(o Rules) bool {
	return r.Egress == o.Egress && slices.Equal(r.Allow, o.Allow) && slices.Equal(r.Deny, o.Deny) &&
		slices.Equal(r.AllowNames, o.AllowNames) && slices.Equal(r.DenyNames, o.DenyNames)
}

// Name tells what the rules say of a query for name (lower case, without the final dot): denied
// when a deny rule matches it, allowed by a rule that names it (named), or by the default egress.
func (r Rules) Name(name string) (allowed, named bool) {
	if matchName(r.DenyNames, name) {
		return false, true
	}
	if matchName(r.AllowNames, name) {
		return true, true
	}
	return r.Egress, false
}

func matchName(rules []string, name string) bool {
	for _, r := range rules {
		if sub, ok := strings.CutPrefix(r, "*."); ok {
			if strings.HasSuffix(name, "."+sub) {
				return true
			}
		} else if name == r {
			return true
		}
	}
	return false
}

// Parse checks the policy in raw (nil or JSON null: none) and returns its rules, with defaultEgress
// for a policy that does not say. Errors: ErrInvalidRequest for a malformed policy.
func Parse(raw json.RawMessage, defaultEgress string) (Rules, error) {
	if l := lastParsed.Load(); l != nil && l.defaultEgress == defaultEgress && l.raw == string(raw) {
		return l.rules.clone(), nil
	}
	var p Policy
	if len(raw) > 0 && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return Rules{}, fmt.Errorf("%s: %v: %w", ExtensionKey, err, sandbox.ErrInvalidRequest)
		}
	}
	rules, err := p.Rules(defaultEgress)
	if err == nil && len(raw) > 0 {
		lastParsed.Store(&parsed{raw: string(raw), defaultEgress: defaultEgress, rules: rules.clone()})
	}
	return rules, err
}

// lastParsed is the last policy Parse read well (none is not kept: it costs nothing to read, and
// creates with and without one come in turns). A client's creates tend to repeat one policy, and a
// sandbox's is parsed twice (its spec checked, then its allocation): comparing the bytes costs a
// fraction of a decode, whose code is cold between two creates (≈0.2 ms then, a warm pool's take
// being ≈3 ms).
var lastParsed atomic.Pointer[parsed]

type parsed struct {
	raw, defaultEgress string
	rules              Rules
}

// clone is r with slices of its own.
func (r Rules) clone() Rules {
	r.Allow, r.Deny = slices.Clone(r.Allow), slices.Clone(r.Deny)
	r.AllowNames, r.DenyNames = slices.Clone(r.AllowNames), slices.Clone(r.DenyNames)
	return r
}

// Rules checks p and returns its rules, with defaultEgress when p does not say.
// Errors: ErrInvalidRequest.
func (p Policy) Rules(defaultEgress string) (Rules, error) {
	egress := p.Egress
	if egress == "" {
		egress = defaultEgress
	}
	var r Rules
	switch egress {
	case EgressAllow:
		r.Egress = true
	case EgressDeny:
	default:
		return Rules{}, fmt.Errorf("%s: egress %q: want %q or %q: %w", ExtensionKey, egress, EgressDeny, EgressAllow, sandbox.ErrInvalidRequest)
	}
	var err error
	if r.Allow, err = parseList("allow", p.Allow, &r.AllowNames); err != nil {
		return Rules{}, err
	}
	if r.Deny, err = parseList("deny", p.Deny, &r.DenyNames); err != nil {
		return Rules{}, err
	}
	return r, nil
}

func parseList(name string, entries []string, domains *[]string) ([]netip.Prefix, error) {
	if len(entries) > maxRules {
		return nil, fmt.Errorf("%s: %d %s rules: at most %d: %w", ExtensionKey, len(entries), name, maxRules, sandbox.ErrInvalidRequest)
	}
	var out []netip.Prefix
	for _, e := range entries {
		pr, isAddr, err := parseDestination(e)
		if err != nil {
			return nil, fmt.Errorf("%s: %s rule %q: %v: %w", ExtensionKey, name, e, err, sandbox.ErrInvalidRequest)
		}
		if !isAddr {
			*domains = append(*domains, e)
			continue
		}
		out = append(out, pr)
	}
	return out, nil
}

// parseDestination reads one rule: a CIDR in canonical form, an address (a /32 or /128), or a domain
// name (isAddr false). An IPv6 one is written as Go (and RFC 5952) writes it: lower case, zeros
// compressed, no zone, no IPv4-mapped form.
func parseDestination(s string) (pr netip.Prefix, isAddr bool, err error) {
	if s == "" {
		return pr, false, fmt.Errorf("empty")
	}
	if strings.ContainsAny(s, "/:") || startsWithDigitDot(s) {
		if strings.Contains(s, "/") {
			pr, err = netip.ParsePrefix(s)
		} else {
			var a netip.Addr
			if a, err = netip.ParseAddr(s); err == nil {
				pr = netip.PrefixFrom(a, a.BitLen())
			}
		}
		switch {
		case err != nil:
			return pr, false, err
		case pr.Addr().Is4In6():
			return pr, false, fmt.Errorf("an IPv4-mapped address: write it as IPv4")
		case pr.Addr().Zone() != "":
			return pr, false, fmt.Errorf("a zone has no place in a rule")
		case pr.Masked() != pr:
			return pr, false, fmt.Errorf("host bits set: %s is the network", pr.Masked())
		case pr.Addr().Is6() && s != canonical(pr, strings.Contains(s, "/")):
			return pr, false, fmt.Errorf("not in canonical form: write %s", canonical(pr, strings.Contains(s, "/")))
		}
		return pr, true, nil
	}
	if err := checkDomain(s); err != nil {
		return pr, false, err
	}
	return pr, false, nil
}

// canonical is how a rule for pr is written: as a prefix, or as an address when it was one.
func canonical(pr netip.Prefix, asPrefix bool) string {
	if asPrefix {
		return pr.String()
	}
	return pr.Addr().String()
}

func startsWithDigitDot(s string) bool {
	for _, c := range s {
		if c == '.' {
			return true
		}
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// checkDomain accepts a lower-case DNS name of letters, digits and hyphens, with an optional leading
// "*." for its subdomains.
func checkDomain(s string) error {
	name := strings.TrimPrefix(s, "*.")
	if len(name) > 253 || !strings.Contains(name, ".") {
		return fmt.Errorf("not a CIDR, an address or a fully qualified name")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("label %q of a name", label)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("%q in a name: lower-case letters, digits and hyphens only", c)
			}
		}
	}
	return nil
}

// Policy is rules written as a policy, the daemon's default made explicit.
func (r Rules) Policy() Policy {
	p := Policy{Egress: EgressDeny, Allow: []string{}, Deny: []string{}}
	if r.Egress {
		p.Egress = EgressAllow
	}
	for _, pr := range r.Allow {
		p.Allow = append(p.Allow, pr.String())
	}
	p.Allow = append(p.Allow, r.AllowNames...)
	for _, pr := range r.Deny {
		p.Deny = append(p.Deny, pr.String())
	}
	p.Deny = append(p.Deny, r.DenyNames...)
	return p
}
