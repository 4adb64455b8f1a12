package oci_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/httpapi/apitest"
	"github.com/sandboxd/sandbox/internal/testenv"
	teststack "github.com/sandboxd/sandbox/internal/testenv/stack"
)

// TestNetworkIPv6Rules: a well-formed IPv6 rule is no bad request. An allow rule for IPv6 is a
// capability the provider lacks (its sandboxes have no IPv6): 422 at create, before anything is
// recorded, and at PUT, leaving the policy that holds; a deny rule for IPv6 is kept (IPv6 is denied
// anyway) beside IPv4 rules that go on working, and the sandbox has no IPv6 address but link-local.
// Every answer is checked against api/extensions.yaml.
func TestNetworkIPv6Rules(t *testing.T) {
	in := newInternet(t)
	p := netProvider(t, in, testenv.StateDir(t))
	st := teststack.New(t, p)
	c, err := client.New(st.URL, client.WithHTTPClient(&http.Client{Transport: apitest.Transport(t, http.DefaultTransport)}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := func(policy string) sandbox.Spec {
		return sandbox.Spec{ClientRequestID: string(sandbox.NewID()), Extensions: map[string]json.RawMessage{"sandboxd.network": json.RawMessage(policy)}}
	}
	for _, policy := range []string{`{"allow":["2001:db8::/32"]}`, `{"egress":"allow","allow":["2001:db8::1"]}`, `{"allow":["::/0","` + in.server.String() + `"]}`} {
		if _, err := c.Create(ctx, spec(policy)); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
			t.Errorf("create with %s: %v, want unsupported_capability", policy, err)
		}
	}
	for _, policy := range []string{`{"allow":["2001:DB8::/32"]}`, `{"deny":["::ffff:198.18.0.1"]}`, `{"deny":["2001:db8::1/64"]}`} {
		if _, err := c.Create(ctx, spec(policy)); !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Errorf("create with %s: %v, want invalid_request", policy, err)
		}
	}
	if list, err := c.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("refused creates recorded %+v %v", list, err)
	}

	sb, err := c.Create(ctx, spec(`{"allow":["`+in.server.String()+`"],"deny":["::/0"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if sb, err = c.WaitState(ctx, sb.ID, sandbox.StateReady); err != nil {
		t.Fatal(err)
	}
	run := func(script string) (string, bool) {
		t.Helper()
		res, err := c.Exec(ctx, sb.ID, sb.Generation, sandbox.Command{Argv: []string{"sh", "-c", script}})
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Stdout), res.ExitCode != nil && *res.ExitCode == 0
	}
	server := "curl -sS --max-time 5 http://" + in.server.String() + "/"
	if out, ok := run(server); !ok || out != "server" {
		t.Errorf("the allowed server beside an IPv6 deny rule: %q %v", out, ok)
	}
	n, err := c.Network(ctx, sb.ID)
	if err != nil || strings.Join(n.Policy.Deny, ",") != "::/0" {
		t.Errorf("network %+v %v", n, err)
	}
	// /proc/net/if_inet6: one line per address, the address in 32 hex digits first.
	if out, ok := run("cat /proc/net/if_inet6"); !ok {
		t.Errorf("if_inet6: %q", out)
	} else {
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if a := strings.Fields(line); len(a) > 0 && !strings.HasPrefix(a[0], "fe80") && a[0] != strings.Repeat("0", 31)+"1" {
				t.Errorf("the sandbox has an IPv6 address not link-local: %s", line)
			}
		}
	}

	if _, err := c.SetNetwork(ctx, sb.ID, sb.Generation, client.NetworkPolicy{Egress: "deny", Allow: []string{"2001:db8::/32"}}); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
		t.Errorf("PUT allowing IPv6: %v, want unsupported_capability", err)
	}
	if n, err := c.Network(ctx, sb.ID); err != nil || strings.Join(n.Policy.Allow, ",") != in.server.String()+"/32" || strings.Join(n.Policy.Deny, ",") != "::/0" {
		t.Errorf("after the refused PUT: %+v %v", n, err)
	}
	if _, err := c.SetNetwork(ctx, sb.ID, sb.Generation, client.NetworkPolicy{Egress: "allow", Deny: []string{"2001:db8::/32", in.other.String()}}); err != nil {
		t.Fatal(err)
	}
	if out, ok := run(server); !ok || out != "server" {
		t.Errorf("egress allow beside an IPv6 deny rule: %q %v", out, ok)
	}
	if _, ok := run("curl -sS --max-time 5 http://" + in.other.String() + "/"); ok {
		t.Error("reached an IPv4 address denied beside an IPv6 deny rule")
	}
}
