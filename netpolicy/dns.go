package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// TTL bounds of what an answer makes the firewall allow: an answer with a TTL below minTTL (0 is
// common) would expire before the connection it was asked for starts.
const (
	minTTL = 10 * time.Second
	maxTTL = time.Hour
)

// Forwarder is the sandboxes' resolver: one DNS server on the pool's gateway (and the IPv6 pool's,
// when there is one), over UDP and TCP, that tells a sandbox by its source address (which the firewall
// keeps honest). A query for a name the
// sandbox's rules deny, or which neither a rule nor its default egress allows, is REFUSED; any other
// goes to the upstream resolvers, and the addresses of an answer for a name an allow rule names are
// allowed to that sandbox for the answer's TTL (Firewall.Learn). Where those addresses lie does not
// matter: the firewall never lets a learned address open the host, a link-local address or another
// sandbox (DNS rebinding). AAAA queries of a sandbox with no IPv6 get an empty answer; those of one
// with IPv6 are forwarded, and the IPv6 addresses of an answer learned as the IPv4 ones are.
type Forwarder struct {
	fw        *Firewall
	upstreams []string
	log       *slog.Logger
	client    *dns.Client

	mu      sync.RWMutex
	clients map[netip.Addr]forwardee

	servers []*dns.Server
}

type forwardee struct {
	ifn   string
	v6    bool // the sandbox has IPv6: its AAAA queries are answered
	rules Rules
	epoch uint64 // the rules' in the firewall
	seen  *seen
}

// seen is what a sandbox's queries told: the name each address was last an answer for, and the names
// refused, both bounded.
type seen struct {
	mu      sync.Mutex
	names   map[netip.Addr]string
	refused []Refusal
}

// Refusal is a name a sandbox's resolver refused, and when.
type Refusal struct {
	Name string
	At   time.Time
}

const (
	maxSeenNames = 1024
	maxRefusals  = 64
)

func (s *seen) answer(name string, addrs []netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.names)+len(addrs) > maxSeenNames {
		clear(s.names) // forgetting costs a name in a later denial, nothing else
	}
	for _, a := range addrs {
		s.names[a] = name
	}
}

func (s *seen) refuse(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.refused) == maxRefusals {
		s.refused = s.refused[1:]
	}
	s.refused = append(s.refused, Refusal{Name: name, At: time.Now()})
}

// Seen returns what the sandbox at addr's queries told: the name each address was an answer for, and
// the names refused, oldest first.
func (f *Forwarder) Seen(addr netip.Addr) (map[netip.Addr]string, []Refusal) {
	f.mu.RLock()
	c, ok := f.clients[addr]
	f.mu.RUnlock()
	if !ok {
		return nil, nil
	}
	c.seen.mu.Lock()
	defer c.seen.mu.Unlock()
	return maps.Clone(c.seen.names), slices.Clone(c.seen.refused)
}

// NewForwarder starts the resolver on fw's gateway, port 53, forwarding to upstreams ("host:port"),
// and on its IPv6 gateway when it has one. It binds before any link holds the gateway's address
// (IP_FREEBIND, IPV6_FREEBIND).
func NewForwarder(fw *Firewall, upstreams []string, log *slog.Logger) (*Forwarder, error) {
	if len(upstreams) == 0 {
		return nil, errors.New("dns: no upstream resolver")
	}
	f := &Forwarder{fw: fw, upstreams: upstreams, log: log, clients: map[netip.Addr]forwardee{},
		client: &dns.Client{Timeout: 2 * time.Second}}
	gateways := []netip.Addr{fw.gateway}
	if fw.gateway6.IsValid() {
		gateways = append(gateways, fw.gateway6)
	}
	for _, gw := range gateways {
		if err := f.listen(gw); err != nil {
			f.Close()
			return nil, err
		}
	}
	if fw.gateway6.IsValid() {
		fw.mu.Lock()
		fw.resolver6 = true // before any sandbox's chains: they accept its DNS
		fw.mu.Unlock()
	}
	return f, nil
}

// listen serves DNS on gw, port 53, over UDP and TCP.
func (f *Forwarder) listen(gw netip.Addr) error {
	level, opt, suffix := unix.IPPROTO_IP, unix.IP_FREEBIND, "4"
	if gw.Is6() {
		level, opt, suffix = unix.IPPROTO_IPV6, unix.IPV6_FREEBIND, "6"
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, 1) })
		return errors.Join(err, serr)
	}}
	addr := netip.AddrPortFrom(gw, 53).String()
	pc, err := lc.ListenPacket(context.Background(), "udp"+suffix, addr)
	if err != nil {
		return fmt.Errorf("dns: %w", err)
	}
	ln, err := lc.Listen(context.Background(), "tcp"+suffix, addr)
	if err != nil {
		pc.Close()
		return fmt.Errorf("dns: %w", err)
	}
	udp := &dns.Server{PacketConn: pc, Handler: f}
	tcp := &dns.Server{Listener: ln, Handler: f, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		IdleTimeout: func() time.Duration { return 5 * time.Second }, MaxTCPQueries: 16}
	for _, s := range []*dns.Server{udp, tcp} {
		go s.ActivateAndServe()
		f.servers = append(f.servers, s)
	}
	return nil
}

// Close stops the resolver.
func (f *Forwarder) Close() error {
	var errs []error
	for _, s := range f.servers {
		errs = append(errs, s.Shutdown())
	}
	return errors.Join(errs...)
}

// Set makes rules, whose epoch in the firewall is epoch (Firewall.Set's), those of the sandbox at
// addrs, on host interface ifn. A query let through under the rules before learns nothing once they
// are replaced in the firewall: its answer is SERVFAIL, and the sandbox's next query meets the new
// rules. The sandbox asks from either of its addresses (IPv6's when the firewall's pool has it).
func (f *Forwarder) Set(addrs Addrs, ifn string, rules Rules, epoch uint64) {
	v6 := addrs.V6.IsValid() && f.fw.pool6.IsValid() && f.fw.pool6.Contains(addrs.V6)
	f.mu.Lock()
	c, ok := f.clients[addrs.V4]
	if !ok || c.ifn != ifn {
		c = forwardee{ifn: ifn, seen: &seen{names: map[netip.Addr]string{}}}
	}
	c.rules, c.epoch, c.v6 = rules, epoch, v6
	f.clients[addrs.V4] = c
	if v6 {
		f.clients[addrs.V6] = c
	}
	f.mu.Unlock()
}

// Remove forgets the sandbox at addrs.
func (f *Forwarder) Remove(addrs Addrs) {
	f.mu.Lock()
	delete(f.clients, addrs.V4)
	if addrs.V6.IsValid() {
		delete(f.clients, addrs.V6)
	}
	f.mu.Unlock()
}

// ServeDNS answers one query of a sandbox.
func (f *Forwarder) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	src, ok := remoteAddr(w.RemoteAddr())
	f.mu.RLock()
	c, known := f.clients[src]
	f.mu.RUnlock()
	if !ok || !known || req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 || req.Response {
		refuse(w, req)
		return
	}
	q := req.Question[0]
	name := strings.TrimSuffix(strings.ToLower(q.Name), ".")
	allowed, named := c.rules.Name(name)
	if !allowed || q.Qclass != dns.ClassINET {
		c.seen.refuse(name)
		refuse(w, req)
		return
	}
	if q.Qtype == dns.TypeAAAA && !c.v6 {
		m := new(dns.Msg)
		m.SetReply(req)
		w.WriteMsg(m)
		return
	}
	out := &dns.Msg{MsgHdr: dns.MsgHdr{Id: dns.Id(), RecursionDesired: true, Opcode: dns.OpcodeQuery},
		Question: []dns.Question{q}}
	var resp *dns.Msg
	var err error
	for _, up := range f.upstreams {
		if resp, _, err = f.client.Exchange(out, up); err == nil {
			break
		}
	}
	if err != nil || resp == nil {
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeServerFailure)
		w.WriteMsg(m)
		return
	}
	var addrs []netip.Addr
	ttl := maxTTL
	for _, rr := range resp.Answer {
		var ip netip.Addr
		var ok bool
		switch a := rr.(type) {
		case *dns.A:
			ip, ok = netip.AddrFromSlice(a.A.To4())
		case *dns.AAAA:
			// An IPv4-mapped address is learned as nothing: the firewall keeps no such address.
			ip, ok = netip.AddrFromSlice(a.AAAA.To16())
			ok = ok && c.v6 && !ip.Is4In6()
		}
		if ok {
			addrs = append(addrs, ip)
			ttl = min(ttl, time.Duration(rr.Header().Ttl)*time.Second)
		}
	}
	c.seen.answer(name, addrs)
	if named {
		if len(addrs) > 0 {
			// Before the answer: the sandbox connects once it has it.
			if err := f.fw.Learn(c.ifn, c.epoch, addrs, max(ttl, minTTL)); err != nil {
				if !errors.Is(err, ErrStalePolicy) {
					f.log.Warn("allowing the addresses of an answer", "name", name, "err", err)
				}
				m := new(dns.Msg)
				m.SetRcode(req, dns.RcodeServerFailure)
				w.WriteMsg(m)
				return
			}
		}
	}
	resp.Id = req.Id
	resp.Question = req.Question
	if w.LocalAddr().Network() == "udp" {
		resp.Truncate(dns.MinMsgSize)
	}
	w.WriteMsg(resp)
}

func refuse(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetRcode(req, dns.RcodeRefused)
	w.WriteMsg(m)
}

func remoteAddr(a net.Addr) (netip.Addr, bool) {
	switch a := a.(type) {
	case *net.UDPAddr:
		ip, ok := netip.AddrFromSlice(a.IP)
		return ip.Unmap(), ok
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(a.IP)
		return ip.Unmap(), ok
	}
	return netip.Addr{}, false
}
