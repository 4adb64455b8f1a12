package oci

import (
	"context"
	"net/netip"

	"github.com/sandboxd/sandbox"
)

// CgroupPrefix begins the name of every cgroup a provider on stateDir makes, for the tests.
func CgroupPrefix(stateDir string) string { return "sandboxd-" + cgroupTag(stateDir) + "-" }

// DetectClass is the runtime class of the runtime binary at path, as New tells it.
func DetectClass(path string) (string, error) {
	c, err := detectClass(context.Background(), path)
	return string(c), err
}

// GVisorHostPids is the host pids limit of a gVisor sandbox whose kernel runs at most tasks tasks.
var GVisorHostPids = gvisorHostPids

// IdleEntries is how many warm pool entries wait, for the tests.
func IdleEntries(p *Provider) int { return p.idleEntries() }

// ImagePoolEntries are the idle entries of the image pools: each one's container name, and the digest
// it runs.
func ImagePoolEntries(p *Provider) map[string]string {
	out := map[string]string{}
	for _, q := range p.imagePools {
		q.mu.Lock()
		for _, e := range q.idle {
			out[e.name] = e.img.Digest
		}
		q.mu.Unlock()
	}
	return out
}

// Abandon stops the fillers of the warm pool and the spares and forgets their idle entries and spares
// without removing them: what a provider that dies leaves behind (a dead daemon's holders end with it).
func Abandon(p *Provider) {
	if p.net != nil && p.net.dns != nil {
		p.net.dns.Close() // its socket, closed by a dying process
	}
	p.pool.stop()
	<-p.pool.done
	idle := p.pool.drain()
	for _, q := range p.imagePools {
		idle = append(idle, q.drain()...)
	}
	for _, e := range idle {
		e.client.Close()
	}
	p.spares.mu.Lock()
	for _, s := range p.spares.idle {
		if s.ns != nil {
			s.ns.release()
		}
	}
	p.spares.idle = nil
	p.spares.mu.Unlock()
}

// SpareIDBases are the first host uids of the idle spares' ranges.
func SpareIDBases(p *Provider) []uint32 {
	p.spares.mu.Lock()
	defer p.spares.mu.Unlock()
	var ids []uint32
	for _, s := range p.spares.idle {
		ids = append(ids, s.m.IDBase)
	}
	return ids
}

// DropAgentConnections closes the kept-alive connections to every sandbox's agent, as a restart would:
// the next call dials again.
func DropAgentConnections(p *Provider) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.boxes {
		b.client.Close()
	}
}

// IDBase is the first host uid of ref's user namespace, from its metadata.
func IDBase(p *Provider, ref sandbox.Ref) (uint32, error) {
	m, err := readMeta(p.box(ref).l)
	return m.IDBase, err
}

// Container is the name runc knows ref's container by: ref.Name(), or a warm pool entry's name when it
// was taken from the pool.
func Container(p *Provider, ref sandbox.Ref) string { return p.box(ref).container() }

// InitPid is the host pid of ref's container init, its agent.
func InitPid(p *Provider, ref sandbox.Ref) (int, error) {
	st, err := p.runc.state(context.Background(), p.box(ref).container())
	return st.Pid, err
}

// SeccompFile is the sandboxes' seccomp program as the agent takes it, for a bundle run by hand.
var SeccompFile = seccompFile

// NetAddr is the address of ref's end of its network link; false when it has none (loopback only).
func NetAddr(p *Provider, ref sandbox.Ref) (string, bool) {
	st, err := readNetState(p.box(ref).l)
	return st.Addr.String(), err == nil
}

// NetAddr6 is the IPv6 address of ref's end of its network link; false when it has none.
func NetAddr6(p *Provider, ref sandbox.Ref) (string, bool) {
	st, err := readNetState(p.box(ref).l)
	return st.Addr6.String(), err == nil && st.Addr6.IsValid()
}

// NetIface is the name of the host's end of ref's link; false when it has none.
func NetIface(p *Provider, ref sandbox.Ref) (string, bool) {
	st, err := readNetState(p.box(ref).l)
	return st.Iface, err == nil
}

// NetPrefix begins the name of every host interface of the provider on stateDir; NetTable is its
// nftables table.
func NetPrefix(stateDir string) string { return "sx" + cgroupTag(stateDir)[:4] }
func NetTable(stateDir string) string  { return "sandboxd_" + cgroupTag(stateDir) }

// CloseNetwork removes the provider's nftables table.
func CloseNetwork(p *Provider) error { return p.closeNetwork() }

// SetNextAddr makes addr the first address p's next network looks at.
func SetNextAddr(p *Provider, addr string) {
	p.net.mu.Lock()
	p.net.next = netip.MustParseAddr(addr)
	p.net.mu.Unlock()
}

// RelayPorts makes p reach every sandbox's ports through its agent's relay, as on gVisor, instead
// of a socket of its own in the sandbox's network namespace.
func RelayPorts(p *Provider, on bool) { p.relayPorts.Store(on) }

// LinkedEntry is an idle warm pool entry with a network link, for the tests.
type LinkedEntry struct {
	Name, Iface, Addr string
	Pid               int
	Ruled             bool // the expected policy is in effect on its link
}

// LinkedEntries are the idle entries of the shared root's pool that have a link.
func LinkedEntries(p *Provider) []LinkedEntry {
	p.pool.mu.Lock()
	defer p.pool.mu.Unlock()
	var out []LinkedEntry
	for _, e := range p.pool.idle {
		if e.link == nil {
			continue
		}
		le := LinkedEntry{Name: e.name, Iface: e.link.st.Iface, Addr: e.link.st.Addr.String(), Ruled: e.link.rules != nil}
		if m, err := readMetaFile(e.l); err == nil {
			le.Pid, _ = containerPid(e.l, m.CgroupPath)
		}
		out = append(out, le)
	}
	return out
}
