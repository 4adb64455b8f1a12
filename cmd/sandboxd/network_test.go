package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// TestOCINetworkAcrossDaemonSIGKILL: networked sandboxes made and terminated, then a daemon killed with
// three running, one of whose containers dies with it; the next daemon keeps the network of the two that
// run, removes the rest, and once everything is terminated and it stops, nothing of the network is
// left: no interface, route or address of the pool, no rule, no table.
func TestOCINetworkAcrossDaemonSIGKILL(t *testing.T) {
	needOCI(t)
	ctx := context.Background()
	dataDir := testenv.StateDir(t)
	removeContainersAtEnd(t, dataDir)
	var rnd [2]byte
	rand.Read(rnd[:])
	pool := fmt.Sprintf("10.232.%d.0/24", rnd[0])
	// The uplink is an interface of the test's (a veth pair going nowhere): the host's own keep their
	// settings.
	uplink := "sxtu" + hex.EncodeToString(rnd[:])
	if out, err := exec.Command("ip", "link", "add", uplink, "type", "veth", "peer", "name", "sxtv"+hex.EncodeToString(rnd[:])).CombinedOutput(); err != nil {
		t.Fatalf("ip link add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", uplink).Run() })
	args := []string{"--provider", "oci", "--oci-warm-pool", "0", "--oci-network-pool", pool, "--oci-network-uplinks", uplink}
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
	create := func(d *daemon, name string) sandbox.Sandbox {
		t.Helper()
		var sb sandbox.Sandbox
		body := map[string]any{"clientRequestId": name, "extensions": map[string]any{"sandboxd.network": map[string]any{"egress": "allow"}}}
		if st := call(ctx, "POST", d.url+"/v1/sandboxes", body, &sb); st != 201 {
			t.Fatalf("create: %d %+v", st, sb)
		}
		return waitFor(t, d.url, sb.ID, sandbox.StateReady)
	}
	terminate := func(d *daemon, sb sandbox.Sandbox) {
		t.Helper()
		if st := call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/actions/terminate", d.url, sb.ID), map[string]any{"expectedGeneration": sb.Generation}, nil); st != 200 {
			t.Fatalf("terminate: %d", st)
		}
		waitFor(t, d.url, sb.ID, sandbox.StateTerminated)
	}

	d := startDaemon(t, dataDir, args...)
	for i := range 20 {
		terminate(d, create(d, fmt.Sprint("cycle-", i)))
	}
	if got := links(); len(got) != 0 {
		t.Fatalf("interfaces after the cycles: %q", got)
	}
	var sbs []sandbox.Sandbox
	for i := range 3 {
		sbs = append(sbs, create(d, fmt.Sprint("kept-", i)))
	}
	if got := links(); len(got) != 3 {
		t.Fatalf("interfaces of three networked sandboxes: %q", got)
	}
	d.kill()
	// One container dies with the daemon.
	dead := containerOf(t, dataDir, sbs[2])
	if out, err := exec.Command("runc", "--root", filepath.Join(stateDir, "runc"), "delete", "-f", dead).CombinedOutput(); err != nil {
		t.Fatalf("runc delete: %v: %s", err, out)
	}

	d = startDaemon(t, dataDir, args...)
	if got := links(); len(got) != 2 {
		t.Errorf("after the restart the interfaces are %q, want the two running sandboxes'", got)
	}
	if n, _ := chains(); n != 2 {
		t.Errorf("after the restart %d sandboxes have rules, want 2", n)
	}
	for _, sb := range sbs[:2] {
		var res sandbox.CommandResult
		if st := call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/commands", d.url, sb.ID),
			map[string]any{"expectedGeneration": sb.Generation, "argv": []string{"cat", "/sys/class/net/eth0/operstate"}}, &res); st != 200 || !strings.Contains(string(res.Stdout), "up") {
			t.Errorf("a kept sandbox's eth0: %d %q", st, res.Stdout)
		}
		terminate(d, sb)
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
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not stop on SIGTERM")
	}
	if _, there := chains(); there {
		t.Error("the table outlived the daemon that had no sandbox with a network")
	}
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if r.Dst != nil && strings.HasPrefix(r.Dst.String(), strings.TrimSuffix(pool, "0/24")) {
			t.Errorf("a route of the pool is left: %s", r)
		}
	}
}
