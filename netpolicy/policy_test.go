package netpolicy

import (
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox"
)

func TestParse(t *testing.T) {
	r, err := Parse(json.RawMessage(`{"egress":"deny","allow":["203.0.113.0/24","198.51.100.7","pypi.org","*.example.com"],"deny":["203.0.113.9/32","bad.example.com"]}`), EgressAllow)
	if err != nil {
		t.Fatal(err)
	}
	if r.Egress || !slices.Equal(r.Allow, []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("198.51.100.7/32")}) ||
		!slices.Equal(r.AllowNames, []string{"pypi.org", "*.example.com"}) || !slices.Equal(r.DenyNames, []string{"bad.example.com"}) ||
		!slices.Equal(r.Deny, []netip.Prefix{netip.MustParsePrefix("203.0.113.9/32")}) {
		t.Errorf("rules %+v", r)
	}
	if !r.Needs() {
		t.Error("an allow list needs a network")
	}
	for raw, egress := range map[string]bool{"": true, "null": true, `{}`: true, `{"egress":"deny"}`: false} {
		r, err := Parse(json.RawMessage(raw), EgressAllow)
		if err != nil || r.Egress != egress {
			t.Errorf("%q: %+v %v", raw, r, err)
		}
	}
	if r, _ := Parse(nil, EgressDeny); r.Needs() {
		t.Error("the default deny needs a network")
	}
	if r, _ := Parse(json.RawMessage(`{"deny":["10.0.0.0/8","x.example"]}`), EgressDeny); r.Needs() {
		t.Error("a deny list alone needs a network")
	}
	long := strings.Repeat("a", 64) + ".example"
	many, _ := json.Marshal(map[string]any{"allow": slices.Repeat([]string{"10.0.0.0/8"}, maxRules+1)})
	for _, bad := range []string{`{"egress":"maybe"}`, `{"allow":["10.0.0.1/8"]}`, `{"allow":["2001:DB8::/32"]}`, `{"deny":["2001:db8::1/32"]}`,
		`{"allow":["2001:0db8::1"]}`, `{"allow":["2001:db8:0:0::/64"]}`, `{"allow":["::ffff:192.0.2.1"]}`, `{"allow":["::ffff:0:0/96"]}`,
		`{"allow":["fe80::1%eth0"]}`, `{"allow":["2001:db8::/129"]}`, `{"allow":["2001:db8:::1"]}`,
		`{"allow":[""]}`, `{"allow":["Example.com"]}`, `{"allow":["localhost"]}`, `{"allow":["a..b"]}`, `{"allow":["-a.b"]}`,
		`{"allow":["*.*.b.c"]}`, `{"allow":["a.b/33"]}`, `{"allow":["1.2.3"]}`, `{"allow":["` + long + `"]}`, `{"allow":["a_b.c"]}`,
		`{"allow":"10.0.0.0/8"}`, `{"other":1}`, `[]`, `{`, string(many)} {
		if _, err := Parse(json.RawMessage(bad), EgressDeny); !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Errorf("%s: %v, want ErrInvalidRequest", bad, err)
		}
	}
}

// TestParseIPv6: a well-formed IPv6 rule is a rule, not a bad request; whether the provider can keep
// an allow rule for IPv6 is its to say (AllowsIPv6), and a deny rule needs nothing of it.
func TestParseIPv6(t *testing.T) {
	r, err := Parse(json.RawMessage(`{"allow":["203.0.113.0/24","2001:db8::/32","2001:db8:1::7","::/0"],"deny":["2001:db8:5::/48","fd00:ec2::254"]}`), EgressDeny)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Allow, []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("2001:db8::/32"),
		netip.MustParsePrefix("2001:db8:1::7/128"), netip.MustParsePrefix("::/0")}) ||
		!slices.Equal(r.Deny, []netip.Prefix{netip.MustParsePrefix("2001:db8:5::/48"), netip.MustParsePrefix("fd00:ec2::254/128")}) {
		t.Errorf("rules %+v", r)
	}
	if pr, ok := r.AllowsIPv6(); !ok || pr.String() != "2001:db8::/32" {
		t.Errorf("AllowsIPv6: %v %v", pr, ok)
	}
	for _, raw := range []string{`{"egress":"allow","deny":["::/0","2001:db8::1"]}`, `{"allow":["203.0.113.0/24"]}`, `{}`} {
		r, err := Parse(json.RawMessage(raw), EgressDeny)
		if err != nil {
			t.Fatal(err)
		}
		if pr, ok := r.AllowsIPv6(); ok {
			t.Errorf("%s allows IPv6: %v", raw, pr)
		}
	}
}

func TestName(t *testing.T) {
	r := Rules{AllowNames: []string{"pypi.org", "*.example.com"}, DenyNames: []string{"bad.example.com", "*.evil.example.com"}}
	for name, want := range map[string][2]bool{
		"pypi.org":              {true, true},
		"files.pypi.org":        {false, false}, // a name is not its subdomains
		"example.com":           {false, false}, // a wildcard is not its apex
		"a.example.com":         {true, true},
		"a.b.example.com":       {true, true},
		"notexample.com":        {false, false},
		"aexample.com":          {false, false},
		"bad.example.com":       {false, true}, // deny beats allow
		"x.evil.example.com":    {false, true},
		"evil.example.com":      {true, true}, // the deny wildcard's apex is the allow wildcard's subdomain
		"other.org":             {false, false},
		"pypi.org.attacker.net": {false, false},
	} {
		allowed, named := r.Name(name)
		if allowed != want[0] || named != want[1] {
			t.Errorf("%s: allowed %v named %v, want %v", name, allowed, named, want)
		}
	}
	r.Egress = true
	if allowed, named := r.Name("other.org"); !allowed || named {
		t.Errorf("egress allow: other.org allowed %v named %v", allowed, named)
	}
	if allowed, _ := r.Name("bad.example.com"); allowed {
		t.Error("egress allow opened a denied name")
	}
}

func TestExplicit(t *testing.T) {
	for s, want := range map[string]bool{"169.254.169.254/32": true, "169.254.0.0/16": true, "169.254.1.0/24": true,
		"169.0.0.0/8": false, "0.0.0.0/0": false, "10.0.0.5/32": true, "10.0.0.0/8": false,
		"fe80::/10": true, "fe80::/64": true, "fe80::/9": false, "::/0": false, "2001:db8::1/128": true, "2001:db8::/32": false} {
		if got := Explicit(netip.MustParsePrefix(s)); got != want {
			t.Errorf("%s: %v", s, got)
		}
	}
}

func TestPolicyRoundTrip(t *testing.T) {
	raw := `{"egress":"allow","allow":["203.0.113.0/24","2001:db8::/32","pypi.org"],"deny":["198.51.100.7/32","2001:db8::7/128","*.bad.example"]}`
	r, err := Parse(json.RawMessage(raw), EgressDeny)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(r.Policy())
	if string(out) != raw {
		t.Errorf("%s, want %s", out, raw)
	}
}

// FuzzParse: any input is a policy whose written form reads back the same, or ErrInvalidRequest.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"egress":"allow"}`, `{"allow":["203.0.113.0/24","*.example.com"],"deny":["a.b"]}`, `{"allow":["1.2.3.4"]}`, `{"deny":["2001:db8::1","fe80::/10"]}`, `null`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r, err := Parse(json.RawMessage(raw), EgressDeny)
		if err != nil {
			if !errors.Is(err, sandbox.ErrInvalidRequest) {
				t.Fatalf("%q: %v", raw, err)
			}
			return
		}
		out, _ := json.Marshal(r.Policy())
		again, err := Parse(out, EgressAllow)
		if err != nil {
			t.Fatalf("%s does not read back: %v", out, err)
		}
		back, _ := json.Marshal(again.Policy())
		if string(back) != string(out) {
			t.Fatalf("%s read back as %s", out, back)
		}
	})
}

// TestParseRepeated: a policy parsed again (the last one is kept) gives the same rules, each call
// its own copy, and only for the same bytes and default.
func TestParseRepeated(t *testing.T) {
	raw := json.RawMessage(`{"allow":["203.0.113.0/24","pypi.org"],"deny":["198.51.100.7/32","bad.example"]}`)
	first, err := Parse(raw, EgressDeny)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Parse(raw, EgressDeny)
	if err != nil || !second.Equal(first) {
		t.Fatalf("again: %+v %v, want %+v", second, err, first)
	}
	first.Allow[0], first.AllowNames[0], first.Deny[0], first.DenyNames[0] = netip.Prefix{}, "x", netip.Prefix{}, "y"
	third, _ := Parse(raw, EgressDeny)
	if !third.Equal(second) {
		t.Errorf("a caller's change to its rules reached the next call's: %+v, want %+v", third, second)
	}
	if r, _ := Parse(raw, EgressAllow); !r.Egress {
		t.Errorf("the same policy under the default allow: %+v, want egress allowed", r)
	}
	if _, err := Parse(json.RawMessage(`{"allow":["203.0.113.0/24"],"x":1}`), EgressDeny); err == nil {
		t.Error("a policy with an unknown field after a good one: no error")
	}
	if r, _ := Parse(json.RawMessage(`{"allow":["192.0.2.1"]}`), EgressDeny); len(r.Allow) != 1 || r.Allow[0] != netip.MustParsePrefix("192.0.2.1/32") {
		t.Errorf("another policy: %+v", r)
	}
}
