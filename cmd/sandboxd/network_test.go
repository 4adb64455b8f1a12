package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestOCINetworkAcrossDaemonSIGKILL: 100 networked sandboxes made and terminated (four at a time), each
// of which sent a datagram to its gateway, then a daemon killed with SIGKILL with three running, one
// of whose containers dies with it. The next daemon keeps the network of the two that run and removes
// the rest, and once everything is terminated and it stops, nothing of the network is left: no
// interface, route or address of the pool, no rule, no table, no tracked flow of a pool address, no
// sandbox's network namespace.
func TestOCINetworkAcrossDaemonSIGKILL(t *testing.T) {
	needOCI(t)
	ctx := context.Background()
	dataDir := testenv.StateDir(t)
	removeContainersAtEnd(t, dataDir)
	pool, pool6, args := networkFlags(t, 232)
	gateway, gateway6 := pool.Addr().Next(), pool6.Addr().Next()
	forwardingBefore := forwarding6(t)
	stateDir, err := filepath.Abs(filepath.Join(dataDir, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(stateDir))
	prefix, table := "sx"+hex.EncodeToString(sum[:4])[:4], "sandboxd_"+hex.EncodeToString(sum[:4])
	links := func() []string {
		t.Helper()
		all, err := netlink.LinkList()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range all {
			if strings.HasPrefix(l.Attrs().Name, prefix) {
				out = append(out, l.Attrs().Name)
			}
		}
		return out
	}
	chains := func() (n int, tableThere bool) {
		t.Helper()
		conn, err := nftables.New()
		if err != nil {
			t.Fatal(err)
		}
		cs, err := conn.ListChainsOfTableFamily(nftables.TableFamilyINet)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.Table.Name == table {
				tableThere = true
				if strings.HasPrefix(c.Name, "fwd-") {
					n++
				}
			}
		}
		return n, tableThere
	}
	// v4 is the IPv4 address of the sandbox whose IPv6 address is a (at the same offset in its pool).
	v4 := func(a netip.Addr) netip.Addr {
		p := pool.Addr().As4()
		return netip.AddrFrom4([4]byte{p[0], p[1], p[2], a.As16()[15]})
	}
	// flows are the tracked flows (IPv4 and IPv6) of a sandbox's address (the pools' but the
	// gateways), but those of keep (IPv4 addresses, and the IPv6 ones at their offsets).
	flows := func(keep ...netip.Addr) []string {
		t.Helper()
		var all []*netlink.ConntrackFlow
		for _, fam := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
			var some []*netlink.ConntrackFlow
			var err error
			for range 3 {
				if some, err = netlink.ConntrackTableList(netlink.ConntrackTable, fam); !errors.Is(err, netlink.ErrDumpInterrupted) {
					break
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, some...)
		}
		var out []string
		for _, f := range all {
			sandboxes, kept := 0, 0
			for _, ip := range []net.IP{f.Forward.SrcIP, f.Forward.DstIP, f.Reverse.SrcIP, f.Reverse.DstIP} {
				a, ok := netip.AddrFromSlice(ip)
				a = a.Unmap()
				switch {
				case ok && pool.Contains(a) && a != gateway:
				case ok && pool6.Contains(a) && a != gateway6:
					a = v4(a)
				default:
					continue
				}
				sandboxes++
				if slices.Contains(keep, a) {
					kept++
				}
			}
			if sandboxes > kept {
				out = append(out, f.String())
			}
		}
		return out
	}
	// The network namespaces of the sandboxes made, by the one they were seen in, and the daemons.
	var nsMu sync.Mutex
	namespaces := map[string]string{}
	var daemons []string
	cgroups := "sandboxd-" + hex.EncodeToString(sum[:4]) + "-"
	// netnsLeft are those of namespaces a process of the test's (a daemon, or one in a sandbox's
	// cgroup), an open file of one, or a mount under the data directory still holds. (A namespace's
	// number is used again once it is gone: one of another's processes may hold the same number.)
	netnsLeft := func(but ...string) []string {
		t.Helper()
		nsMu.Lock()
		defer nsMu.Unlock()
		var out []string
		seen := map[string]bool{}
		held := func(what, ns string) {
			if sb, ok := namespaces[ns]; ok && !slices.Contains(but, sb) && !seen[ns] {
				seen[ns] = true
				out = append(out, fmt.Sprintf("%s of %s (%s)", ns, sb, what))
			}
		}
		procs, _ := filepath.Glob("/proc/[0-9]*")
		for _, proc := range procs {
			cg, err := os.ReadFile(proc + "/cgroup")
			if err != nil || !strings.Contains(string(cg), cgroups) && !slices.Contains(daemons, filepath.Base(proc)) {
				continue
			}
			if ns, err := os.Readlink(proc + "/ns/net"); err == nil {
				held(proc, ns)
			}
			fds, _ := filepath.Glob(proc + "/fd/*")
			for _, fd := range fds {
				if ns, err := os.Readlink(fd); err == nil {
					held(fd, ns)
				}
			}
		}
		mounts, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(mounts), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dataDir) {
				held("mounted at "+f[4], f[3])
			}
		}
		return out
	}
	create := func(d *daemon, name string) (sandbox.Sandbox, error) {
		var sb sandbox.Sandbox
		// A network (a CIDR rule), on which nothing the test sends leaves the host.
		body := map[string]any{"clientRequestId": name, "extensions": map[string]any{"sandboxd.network": map[string]any{"allow": []string{"192.0.2.0/24"}}}}
		if st := call(ctx, "POST", d.url+"/v1/sandboxes", body, &sb); st != 201 {
			return sb, fmt.Errorf("create: %d %+v", st, sb)
		}
		if sb, err := pollState(d.url, sb.ID, sandbox.StateReady); err != nil {
			return sb, err
		}
		// A flow of each of its addresses, to the gateways.
		var res sandbox.CommandResult
		script := fmt.Sprintf(`import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("%s", 53)); socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).sendto(b"x", ("%s", 53))`, gateway, gateway6)
		if st := call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/commands", d.url, sb.ID),
			map[string]any{"expectedGeneration": sb.Generation, "argv": []string{"python3", "-c", script}}, &res); st != 200 || res.ExitCode == nil || *res.ExitCode != 0 {
			return sb, fmt.Errorf("send from %s: %d %+v", sb.ID, st, res)
		}
		raw, err := os.ReadFile(filepath.Join(stateDir, "sandboxes", sb.Ref().Name(), "init.pid"))
		if err != nil {
			return sb, err
		}
		ns, err := os.Readlink("/proc/" + strings.TrimSpace(string(raw)) + "/ns/net")
		if err != nil {
			return sb, err
		}
		nsMu.Lock()
		namespaces[ns] = string(sb.ID)
		nsMu.Unlock()
		return sb, nil
	}
	terminate := func(d *daemon, sb sandbox.Sandbox) error {
		if st := call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/actions/terminate", d.url, sb.ID), map[string]any{"expectedGeneration": sb.Generation}, nil); st != 200 {
			return fmt.Errorf("terminate %s: %d", sb.ID, st)
		}
		_, err := pollState(d.url, sb.ID, sandbox.StateTerminated)
		return err
	}
	addrOf := func(sb sandbox.Sandbox) netip.Addr {
		t.Helper()
		var st struct{ Addr netip.Addr }
		raw, err := os.ReadFile(filepath.Join(stateDir, "sandboxes", sb.Ref().Name(), "net.json"))
		if err == nil {
			err = json.Unmarshal(raw, &st)
		}
		if err != nil {
			t.Fatal(err)
		}
		return st.Addr
	}

	d := startDaemon(t, dataDir, args...)
	daemons = append(daemons, strconv.Itoa(d.cmd.Process.Pid))
	const cycles, workers = 100, 4
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range cycles / workers {
				sb, err := create(d, fmt.Sprintf("cycle-%d-%d", w, i))
				if err == nil {
					err = terminate(d, sb)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d networked create/terminate cycles, %d at a time: %v", cycles, workers, time.Since(start).Round(time.Millisecond))
	if got := links(); len(got) != 0 {
		t.Errorf("interfaces after the cycles: %q", got)
	}
	if got := flows(); len(got) > 0 {
		t.Errorf("tracked flows of the pool after the cycles: %q", got)
	}
	if got := netnsLeft(); len(got) > 0 {
		t.Errorf("network namespaces held after the cycles: %q", got)
	}
	var sbs []sandbox.Sandbox
	for i := range 3 {
		sb, err := create(d, fmt.Sprint("kept-", i))
		if err != nil {
			t.Fatal(err)
		}
		sbs = append(sbs, sb)
	}
	if got := links(); len(got) != 3 {
		t.Fatalf("interfaces of three networked sandboxes: %q", got)
	}
	if got := flows(addrOf(sbs[0]), addrOf(sbs[1])); len(got) == 0 {
		t.Fatal("the third sandbox's datagram left no tracked flow: the checks below would show nothing")
	}
	d.kill()
	// One container dies with the daemon.
	dead := containerOf(t, dataDir, sbs[2])
	if out, err := exec.Command("runc", "--root", filepath.Join(stateDir, "runc"), "delete", "-f", dead).CombinedOutput(); err != nil {
		t.Fatalf("runc delete: %v: %s", err, out)
	}

	d = startDaemon(t, dataDir, args...)
	daemons = append(daemons, strconv.Itoa(d.cmd.Process.Pid))
	if got := links(); len(got) != 2 {
		t.Errorf("after the restart the interfaces are %q, want the two running sandboxes'", got)
	}
	if n, _ := chains(); n != 2 {
		t.Errorf("after the restart %d sandboxes have rules, want 2", n)
	}
	if got := flows(addrOf(sbs[0]), addrOf(sbs[1])); len(got) > 0 {
		t.Errorf("after the restart the dead sandbox's flows are tracked: %q", got)
	}
	if got := netnsLeft(string(sbs[0].ID), string(sbs[1].ID)); len(got) > 0 {
		t.Errorf("after the restart network namespaces are held: %q", got)
	}
	for _, sb := range sbs[:2] {
		var res sandbox.CommandResult
		if st := call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/commands", d.url, sb.ID),
			map[string]any{"expectedGeneration": sb.Generation, "argv": []string{"cat", "/sys/class/net/eth0/operstate"}}, &res); st != 200 || !strings.Contains(string(res.Stdout), "up") {
			t.Errorf("a kept sandbox's eth0: %d %q", st, res.Stdout)
		}
		if err := terminate(d, sb); err != nil {
			t.Fatal(err)
		}
	}
	if st := call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/actions/terminate", d.url, sbs[2].ID), map[string]any{"expectedGeneration": sbs[2].Generation}, nil); st != 200 {
		t.Fatalf("terminate the dead one: %d", st)
	}
	if got := links(); len(got) != 0 {
		t.Errorf("interfaces once all are terminated: %q", got)
	}
	if n, there := chains(); n != 0 || !there {
		t.Errorf("once all are terminated: %d sandboxes with rules, table there %v", n, there)
	}
	if got := flows(); len(got) > 0 {
		t.Errorf("tracked flows of the pool once all are terminated: %q", got)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not stop on SIGTERM")
	}
	if _, there := chains(); there {
		t.Error("the table outlived the daemon that had no sandbox with a network")
	}
	routes, err := netlink.RouteList(nil, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		if a, ok := netip.AddrFromSlice(r.Dst.IP); ok && (pool.Contains(a.Unmap()) || pool6.Contains(a)) {
			t.Errorf("a route of the pools is left: %s", r)
		}
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if b, ok := netip.AddrFromSlice(a.IP); ok && (pool.Contains(b.Unmap()) || pool6.Contains(b)) {
			t.Errorf("an address of the pools is left: %s", a)
		}
	}
	if got := forwarding6(t); got != forwardingBefore {
		t.Errorf("the host's IPv6 forwarding is %s once the daemon stopped, was %s", got, forwardingBefore)
	}
	if got := flows(); len(got) > 0 {
		t.Errorf("tracked flows of the pool once the daemon stopped: %q", got)
	}
	if got := netnsLeft(); len(got) > 0 {
		t.Errorf("network namespaces held once all are terminated: %q", got)
	}
}

// pollState polls a sandbox until it reaches want, for at most a minute.
func pollState(url string, id sandbox.ID, want sandbox.State) (sandbox.Sandbox, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		var sb sandbox.Sandbox
		call(context.Background(), "GET", url+"/v1/sandboxes/"+string(id), nil, &sb)
		if sb.State == want {
			return sb, nil
		}
		if time.Now().After(deadline) {
			return sb, fmt.Errorf("sandbox %s is %s, want %s (failure %+v)", id, sb.State, want, sb.Failure)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// forwarding6 is the host's net.ipv6.conf.all.forwarding.
func forwarding6(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("/proc/sys/net/ipv6/conf/all/forwarding")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(raw))
}

// TestOCINetworkEgressAllowDefault: with --oci-network-egress allow, a sandbox whose spec has no policy
// gets a network and the policy {"egress":"allow"}, visible in GET .../network; one whose policy says
// deny keeps loopback only. The daemon, stopped with none left, puts the host's IPv6 forwarding back.
func TestOCINetworkEgressAllowDefault(t *testing.T) {
	needOCI(t)
	ctx := context.Background()
	dataDir := testenv.StateDir(t)
	removeContainersAtEnd(t, dataDir)
	_, _, args := networkFlags(t, 233)
	forwardingBefore := forwarding6(t)
	d := startDaemon(t, dataDir, append(args, "--oci-network-egress", "allow")...)
	for _, tc := range []struct {
		name, policy string // policy: the spec's, none when empty
		want         map[string]any
		ifaces       string
	}{
		{"no policy", "", map[string]any{"egress": "allow"}, "eth0 lo"},
		{"deny", `{"egress":"deny"}`, map[string]any{"egress": "deny"}, "lo"},
	} {
		body := map[string]any{"clientRequestId": tc.name}
		if tc.policy != "" {
			body["extensions"] = map[string]any{"sandboxd.network": json.RawMessage(tc.policy)}
		}
		var sb sandbox.Sandbox
		if st := call(ctx, "POST", d.url+"/v1/sandboxes", body, &sb); st != 201 {
			t.Fatalf("%s: create: %d %+v", tc.name, st, sb)
		}
		sb = waitFor(t, d.url, sb.ID, sandbox.StateReady)
		var status struct{ Policy map[string]any }
		if st := call(ctx, "GET", fmt.Sprintf("%s/v1/sandboxes/%s/network", d.url, sb.ID), nil, &status); st != 200 {
			t.Fatalf("%s: GET network: %d", tc.name, st)
		}
		if got, _ := json.Marshal(status.Policy); !jsonEqual(t, got, tc.want) {
			t.Errorf("%s: policy %s, want %v", tc.name, got, tc.want)
		}
		var res sandbox.CommandResult
		if st := call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/commands", d.url, sb.ID),
			map[string]any{"expectedGeneration": sb.Generation, "argv": []string{"ls", "/sys/class/net"}}, &res); st != 200 {
			t.Fatalf("%s: ls: %d", tc.name, st)
		}
		if got := strings.Join(strings.Fields(string(res.Stdout)), " "); got != tc.ifaces {
			t.Errorf("%s: interfaces %q, want %q", tc.name, got, tc.ifaces)
		}
		if st := call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/actions/terminate", d.url, sb.ID), map[string]any{"expectedGeneration": sb.Generation}, nil); st != 200 {
			t.Fatalf("%s: terminate: %d", tc.name, st)
		}
		waitFor(t, d.url, sb.ID, sandbox.StateTerminated)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not stop on SIGTERM")
	}
	if got := forwarding6(t); got != forwardingBefore {
		t.Errorf("the host's IPv6 forwarding is %s once the daemon stopped, was %s", got, forwardingBefore)
	}
}

func jsonEqual(t *testing.T, raw []byte, want any) bool {
	t.Helper()
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	return json.Unmarshal(raw, &a) == nil && json.Unmarshal(w, &b) == nil && reflect.DeepEqual(a, b)
}

// networkFlags are the daemon's flags of an oci provider whose pool is a random /24 of 10.second.0.0/16,
// whose IPv6 pool a random /64 of fd00::/8, and whose uplink is an interface of the test's (a veth
// pair going nowhere, removed when the test ends): the host's own interfaces keep their settings.
func networkFlags(t *testing.T, second byte) (netip.Prefix, netip.Prefix, []string) {
	t.Helper()
	var rnd [2]byte
	rand.Read(rnd[:])
	pool := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, second, rnd[0], 0}), 24)
	pool6 := netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0x5b, second, rnd[0], rnd[1]}), 64)
	uplink := "sxtu" + hex.EncodeToString(rnd[:])
	if out, err := exec.Command("ip", "link", "add", uplink, "type", "veth", "peer", "name", "sxtv"+hex.EncodeToString(rnd[:])).CombinedOutput(); err != nil {
		t.Fatalf("ip link add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", uplink).Run() })
	return pool, pool6, []string{"--provider", "oci", "--oci-warm-pool", "0", "--oci-network-pool", pool.String(),
		"--oci-network-pool6", pool6.String(), "--oci-network-uplinks", uplink}
}

// TestOCIWarmPoolNetworkFlag: how many warm pool entries keep a link made ahead, by default and as
// --oci-warm-pool-network says, and the counts refused.
func TestOCIWarmPoolNetworkFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{nil, 0}, // the default pool of 4, egress deny: sandboxes on loopback take them all
		{[]string{"--oci-warm-pool", "9"}, 0},
		{[]string{"--oci-warm-pool", "9", "--oci-warm-pool-network", "3"}, 3},
		{[]string{"--oci-warm-pool", "0"}, 0},
		{[]string{"--oci-network-egress", "allow"}, 4},
		{[]string{"--oci-network-egress", "allow", "--oci-warm-pool", "7"}, 7},
		{[]string{"--oci-network-egress", "allow", "--oci-warm-pool-network", "2"}, 2},
		{[]string{"--oci-warm-pool-network", "0", "--oci-network-egress", "allow"}, 0},
		{[]string{"--oci-warm-pool", "3", "--oci-warm-pool-network", "3"}, 3},
	} {
		m := NewMain(io.Discard)
		if err := m.ParseFlags(c.args); err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if got := m.OCINetwork.config(m.OCIWarmPool).WarmPoolLinks; got != c.want {
			t.Errorf("%q: %d entries with a link, want %d", c.args, got, c.want)
		}
	}
	for _, bad := range [][]string{
		{"--oci-warm-pool-network", "5"}, // more than the pool's 4
		{"--oci-warm-pool", "1", "--oci-warm-pool-network", "2"},
		{"--oci-warm-pool-network", "-1"},
		{"--oci-warm-pool-network", "x"},
	} {
		if err := NewMain(io.Discard).ParseFlags(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestOCINetworkPool6Flag: --oci-network-pool6 takes auto (the default), off or a prefix inside
// fc00::/7, and refuses the rest.
func TestOCINetworkPool6Flag(t *testing.T) {
	for _, c := range []struct {
		args []string
		pool string
		auto bool
	}{
		{nil, "invalid Prefix", true},
		{[]string{"--oci-network-pool6", "auto"}, "invalid Prefix", true},
		{[]string{"--oci-network-pool6", "off"}, "invalid Prefix", false},
		{[]string{"--oci-network-pool6", "fd5b:2c1e:77a0::/64"}, "fd5b:2c1e:77a0::/64", true},
		{[]string{"--oci-network-pool6", "off", "--oci-network-pool6", "fd00::/96"}, "fd00::/96", true},
	} {
		m := NewMain(io.Discard)
		if err := m.ParseFlags(c.args); err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		cfg := m.OCINetwork.config(m.OCIWarmPool)
		if cfg.Pool6.String() != c.pool || cfg.AutoPool6 != c.auto {
			t.Errorf("%q: pool6 %s auto %v, want %s %v", c.args, cfg.Pool6, cfg.AutoPool6, c.pool, c.auto)
		}
	}
	for _, bad := range []string{"2001:db8::/64", "10.0.0.0/8", "fd00::1/64", "::ffff:10.0.0.0/104", "fd00::", "yes", ""} {
		if err := NewMain(io.Discard).ParseFlags([]string{"--oci-network-pool6", bad}); err == nil {
			t.Errorf("--oci-network-pool6 %q accepted", bad)
		}
	}
}
