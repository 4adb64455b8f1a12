package oci_test

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/httpapi"
	"github.com/sandboxd/sandbox/httpapi/apitest"
	"github.com/sandboxd/sandbox/internal/testenv"
	teststack "github.com/sandboxd/sandbox/internal/testenv/stack"
	"github.com/sandboxd/sandbox/provider/oci"
)

// TestNetworkAPI: the policy through GET and PUT /v1/sandboxes/{id}/network on oci, every answer
// checked against api/extensions.yaml: a change holds for new connections while the sandbox runs,
// connections open go on, it is fenced by the generation, denials are counted and listed with the
// name they were resolved from, and IPv6 rules are what the provider can keep of them.
func TestNetworkAPI(t *testing.T) {
	in := newInternet(t)
	p := netProvider(t, in, testenv.StateDir(t))
	st := teststack.New(t, p, teststack.API(func(c *httpapi.Config) { c.HeartbeatInterval = 200 * time.Millisecond }))
	c, err := client.New(st.URL, client.WithHTTPClient(&http.Client{Transport: apitest.Transport(t, http.DefaultTransport)}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	create := func(policy string) *sandbox.Sandbox { t.Helper(); return createReady(t, ctx, c, policy) }
	run := func(sb *sandbox.Sandbox, script string) (string, bool) {
		t.Helper()
		return runIn(t, ctx, c, sb, script)
	}
	server := "http://" + in.server.String() + "/"

	t.Run("default: loopback, then a policy set while it runs", func(t *testing.T) {
		sb := create("")
		n, err := c.Network(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if n.Policy.Egress != "deny" || len(n.Policy.Allow) != 0 || n.Generation != sb.Generation {
			t.Errorf("network %+v", n)
		}
		if _, ok := run(sb, "curl -sS --max-time 2 "+server); ok {
			t.Error("reached the server before any policy allowed it")
		}
		if _, err := c.SetNetwork(ctx, sb.ID, sb.Generation+1, client.NetworkPolicy{Egress: "allow"}); !errors.Is(err, sandbox.ErrGenerationConflict) {
			t.Errorf("a stale generation: %v, want a generation conflict", err)
		}
		n, err = c.SetNetwork(ctx, sb.ID, sb.Generation, client.NetworkPolicy{Allow: []string{"allowed.test"}})
		if err != nil {
			t.Fatal(err)
		}
		if n.Policy.Egress != "deny" || strings.Join(n.Policy.Allow, ",") != "allowed.test" {
			t.Errorf("after the change: %+v", n)
		}
		if out, ok := run(sb, "curl -sS --max-time 2 http://allowed.test/"); !ok || out != "server" {
			t.Errorf("after the change allowed.test: %q %v", out, ok)
		}
		run(sb, "curl -sS --max-time 2 http://"+in.other.String()+"/; curl -sS --max-time 2 http://other.test/")
		n, err = c.Network(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if n.AllowedConnections == 0 || n.DeniedConnections == 0 {
			t.Errorf("counters %d allowed, %d denied", n.AllowedConnections, n.DeniedConnections)
		}
		var sawAddr, sawName bool
		for _, d := range n.Denials {
			sawAddr = sawAddr || d.Destination == in.other.String()
			sawName = sawName || (d.Name == "other.test" && d.Destination == "")
			if time.Since(d.Time) > time.Minute || time.Until(d.Time) > time.Second {
				t.Errorf("denial at %v", d.Time)
			}
		}
		if !sawAddr || !sawName {
			t.Errorf("denials %+v: want %s and the name other.test", n.Denials, in.other)
		}
		// The spec keeps what was asked at create.
		if got, _ := c.Get(ctx, sb.ID); len(got.Spec.Extensions) != 0 {
			t.Errorf("spec extensions %v", got.Spec.Extensions)
		}
	})
	t.Run("a connection open goes on when the policy denies; a new one does not", func(t *testing.T) {
		sb := create(`{"egress":"allow"}`)
		// A download of 64 MiB at 4 MiB/s: open while the policy changes under it.
		done := make(chan string, 1)
		go func() {
			out, _ := run(sb, "curl -sS --max-time 60 --limit-rate 4M -o /dev/null -w '%{size_download}' "+server+"bytes/67108864")
			done <- out
		}()
		time.Sleep(time.Second)
		if _, err := c.SetNetwork(ctx, sb.ID, sb.Generation, client.NetworkPolicy{Egress: "deny"}); err != nil {
			t.Fatal(err)
		}
		if _, ok := run(sb, "curl -sS --max-time 2 "+server); ok {
			t.Error("a new connection went out after the policy denied it")
		}
		if got := <-done; got != "67108864" {
			t.Errorf("the open download got %q bytes", got)
		}
	})
	t.Run("denials are streamed, and the stream ends with the sandbox", func(t *testing.T) {
		sb := create(`{"allow":["allowed.test"]}`)
		hc := &http.Client{Transport: apitest.Transport(t, http.DefaultTransport)}
		sctx, scancel := context.WithTimeout(ctx, time.Minute)
		defer scancel()
		req, _ := http.NewRequestWithContext(sctx, "GET", st.URL+"/v1/sandboxes/"+string(sb.ID)+"/network/denials", nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		events := make(chan [2]string, 16)
		go func() {
			defer close(events)
			sc := bufio.NewScanner(resp.Body)
			var name string
			for sc.Scan() {
				line := sc.Text()
				if line == ": heartbeat" {
					events <- [2]string{"heartbeat", ""}
				} else if v, ok := strings.CutPrefix(line, "event: "); ok {
					name = v
				} else if v, ok := strings.CutPrefix(line, "data: "); ok {
					events <- [2]string{name, v}
				}
			}
		}()
		run(sb, "curl -sS --max-time 2 http://"+in.other.String()+"/")
		next := func() [2]string {
			t.Helper()
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatal("the stream closed")
				}
				return ev
			case <-time.After(20 * time.Second):
				t.Fatal("no event")
			}
			return [2]string{}
		}
		ev := next()
		beats := 0
		for ; ev[0] == "heartbeat"; ev = next() {
			beats++
		}
		var d sandbox.NetworkDenial
		if err := json.Unmarshal([]byte(ev[1]), &d); ev[0] != "denial" || err != nil || d.Destination != in.other.String() {
			t.Fatalf("event %q: %+v %v", ev, d, err)
		}
		if _, err := c.Terminate(ctx, sb.ID, sb.Generation); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		for ev = next(); ev[0] == "denial" || ev[0] == "heartbeat"; ev = next() {
			if ev[0] == "heartbeat" {
				beats++
			}
		}
		if beats == 0 {
			t.Error("no heartbeat between the events")
		}
		if ev[0] != "end" || !strings.Contains(ev[1], "reason") {
			t.Errorf("last event %q, want end", ev)
		}
		if _, ok := <-events; ok {
			t.Error("the stream went on after its end")
		}
	})
	t.Run("the client's stream of denials", func(t *testing.T) {
		sb := create(`{"egress":"deny","allow":["allowed.test"]}`)
		type result struct {
			got []sandbox.NetworkDenial
			end *client.NetworkDenialsEnd
			err error
		}
		done := make(chan result, 1)
		go func() {
			var r result
			r.end, r.err = c.StreamNetworkDenials(ctx, sb.ID, func(d sandbox.NetworkDenial) bool {
				r.got = append(r.got, d)
				return true
			})
			done <- r
		}()
		run(sb, "getent hosts other.test")
		time.Sleep(time.Second)
		if _, err := c.Terminate(ctx, sb.ID, sb.Generation); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || r.end == nil || r.end.Reason == "" {
			t.Fatalf("end %+v, %v", r.end, r.err)
		}
		if len(r.got) == 0 || r.got[len(r.got)-1].Name != "other.test" {
			t.Errorf("denials %+v, want the name other.test", r.got)
		}
	})
	t.Run("malformed policies are refused", func(t *testing.T) {
		sb := create("")
		for _, bad := range []client.NetworkPolicy{{Egress: "sometimes"}, {Allow: []string{"10.0.0.1/8"}}, {Deny: []string{"::1/64"}}, {Allow: []string{"UPPER.example"}}} {
			if _, err := c.SetNetwork(ctx, sb.ID, sb.Generation, bad); !errors.Is(err, sandbox.ErrInvalidRequest) {
				t.Errorf("%+v: %v, want invalid request", bad, err)
			}
		}
		if _, err := c.Network(ctx, sandbox.ID("sbx_nope")); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("an unknown sandbox: %v", err)
		}
	})
	t.Run("ipv6 rules", func(t *testing.T) { networkIPv6Rules(t, ctx, c, in, create, run) })
}

// createReady creates a sandbox through c whose spec holds policy (none when empty) and waits until it
// is ready.
func createReady(t *testing.T, ctx context.Context, c *client.Client, policy string) *sandbox.Sandbox {
	t.Helper()
	spec := sandbox.Spec{ClientRequestID: string(sandbox.NewID())}
	if policy != "" {
		spec.Extensions = map[string]json.RawMessage{"sandboxd.network": json.RawMessage(policy)}
	}
	sb, err := c.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	for sb.State != sandbox.StateReady {
		if sb.State == sandbox.StateFailed {
			t.Fatalf("sandbox failed: %+v", sb.Failure)
		}
		time.Sleep(20 * time.Millisecond)
		if sb, err = c.Get(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	return sb
}

// runIn runs script with sh in sb through c and returns its output and whether it exited 0.
func runIn(t *testing.T, ctx context.Context, c *client.Client, sb *sandbox.Sandbox, script string) (string, bool) {
	t.Helper()
	res, err := c.Exec(ctx, sb.ID, sb.Generation, sandbox.Command{Argv: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatal(err)
	}
	return string(res.Stdout), res.ExitCode != nil && *res.ExitCode == 0
}

// networkIPv6Rules: a well-formed IPv6 rule is no bad request. On a provider with an IPv6 pool an
// allow rule for IPv6 is kept and holds: the sandbox has an address of the pool and reaches what the
// rule allows, a PUT replaces it for new connections, and a denial over IPv6 is listed. On one
// without (no pool, or its IPv6 turned off), an allow rule for IPv6 is a capability the provider
// lacks: 422 at create, before anything is recorded, and at PUT, leaving the policy that holds; a deny
// rule for IPv6 is kept (IPv6 is denied anyway) beside IPv4 rules that go on working, and the sandbox
// has no IPv6 address but link-local and loopback.
func networkIPv6Rules(t *testing.T, ctx context.Context, c *client.Client, in *internet,
	create func(string) *sandbox.Sandbox, run func(*sandbox.Sandbox, string) (string, bool)) {
	spec := func(policy string) sandbox.Spec {
		return sandbox.Spec{ClientRequestID: string(sandbox.NewID()), Extensions: map[string]json.RawMessage{"sandboxd.network": json.RawMessage(policy)}}
	}
	for _, policy := range []string{`{"allow":["2001:DB8::/32"]}`, `{"deny":["::ffff:198.18.0.1"]}`, `{"deny":["2001:db8::1/64"]}`} {
		if _, err := c.Create(ctx, spec(policy)); !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Errorf("create with %s: %v, want invalid_request", policy, err)
		}
	}
	server6 := "curl -sS --max-time 5 -g http://" + netip.AddrPortFrom(in.server6, 80).String() + "/"
	other6 := "curl -sS --max-time 5 -g http://" + netip.AddrPortFrom(in.other6, 80).String() + "/"
	sb := create(`{"allow":["` + netip.PrefixFrom(in.server6, 64).Masked().String() + `"]}`)
	if out, ok := run(sb, server6); !ok || out != "server6" {
		t.Errorf("the server allowed by an IPv6 rule: %q %v", out, ok)
	}
	if _, ok := run(sb, other6); ok {
		t.Error("reached an IPv6 address no rule allows")
	}
	if out, ok := run(sb, "cat /proc/net/if_inet6"); !ok || !strings.Contains(out, hex.EncodeToString(in.pool6().Addr().AsSlice()[:8])) {
		t.Errorf("the sandbox has no address of the IPv6 pool %s: %q", in.pool6(), out)
	}
	if _, err := c.SetNetwork(ctx, sb.ID, sb.Generation, client.NetworkPolicy{Egress: "allow", Deny: []string{in.server6.String()}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := run(sb, server6); ok {
		t.Error("reached an IPv6 address denied by the policy set")
	}
	if out, ok := run(sb, other6); !ok || out != "other6" {
		t.Errorf("egress allow beside an IPv6 deny rule: %q %v", out, ok)
	}
	if n, err := c.Network(ctx, sb.ID); err != nil || n.Policy.Egress != "allow" || strings.Join(n.Policy.Deny, ",") != in.server6.String()+"/128" {
		t.Errorf("network %+v %v", n, err)
	} else if n.DeniedConnections == 0 || len(n.Denials) == 0 || n.Denials[0].Destination != in.server6.String() {
		t.Errorf("the IPv6 denial is not shown: %+v", n)
	}

	// A provider without an IPv6 pool, through an API of its own.
	p4 := netProvider(t, in, testenv.StateDir(t), func(c *oci.Config) {
		c.Network.Pool6 = netip.Prefix{}
		c.Network.Pool = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 232, in.k, 0}), 24)
	})
	st4 := teststack.New(t, p4)
	c4, err := client.New(st4.URL, client.WithHTTPClient(&http.Client{Transport: apitest.Transport(t, http.DefaultTransport)}))
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{`{"allow":["2001:db8::/32"]}`, `{"egress":"allow","allow":["2001:db8::1"]}`, `{"allow":["::/0","` + in.server.String() + `"]}`} {
		if _, err := c4.Create(ctx, spec(policy)); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
			t.Errorf("create with %s: %v, want unsupported_capability", policy, err)
		}
	}
	if after, err := c4.List(ctx); err != nil || len(after) != 0 {
		t.Fatalf("refused creates recorded: %d sandboxes (%v)", len(after), err)
	}
	sb4 := createReady(t, ctx, c4, `{"allow":["`+in.server.String()+`"],"deny":["::/0"]}`)
	run4 := func(script string) (string, bool) { t.Helper(); return runIn(t, ctx, c4, sb4, script) }
	server := "curl -sS --max-time 5 http://" + in.server.String() + "/"
	if out, ok := run4(server); !ok || out != "server" {
		t.Errorf("the allowed server beside an IPv6 deny rule: %q %v", out, ok)
	}
	if n, err := c4.Network(ctx, sb4.ID); err != nil || strings.Join(n.Policy.Deny, ",") != "::/0" {
		t.Errorf("network %+v %v", n, err)
	}
	// /proc/net/if_inet6: one line per address, the address in 32 hex digits first.
	out, ok := run4("cat /proc/net/if_inet6")
	if !ok {
		t.Fatalf("if_inet6: %q", out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if a := strings.Fields(line); len(a) > 0 && !strings.HasPrefix(a[0], "fe80") && a[0] != strings.Repeat("0", 31)+"1" {
			t.Errorf("the sandbox has an IPv6 address neither link-local nor loopback: %s", line)
		}
	}
	if _, err := c4.SetNetwork(ctx, sb4.ID, sb4.Generation, client.NetworkPolicy{Egress: "deny", Allow: []string{"2001:db8::/32"}}); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
		t.Errorf("PUT allowing IPv6: %v, want unsupported_capability", err)
	}
	if n, err := c4.Network(ctx, sb4.ID); err != nil || strings.Join(n.Policy.Allow, ",") != in.server.String()+"/32" || strings.Join(n.Policy.Deny, ",") != "::/0" {
		t.Errorf("after the refused PUT: %+v %v", n, err)
	}
	if _, err := c4.SetNetwork(ctx, sb4.ID, sb4.Generation, client.NetworkPolicy{Egress: "allow", Deny: []string{"2001:db8::/32", in.other.String()}}); err != nil {
		t.Fatal(err)
	}
	if out, ok := run4(server); !ok || out != "server" {
		t.Errorf("egress allow beside an IPv6 deny rule: %q %v", out, ok)
	}
	if _, ok := run4("curl -sS --max-time 5 http://" + in.other.String() + "/"); ok {
		t.Error("reached an IPv4 address denied beside an IPv6 deny rule")
	}
	if _, ok := run4(server6); ok {
		t.Error("reached an IPv6 address from a sandbox of a provider without IPv6")
	}
}
