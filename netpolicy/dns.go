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

// Forwarder is the sandboxes' resolver: one DNS server on the pool's gateway, over UDP and TCP, that
// tells a sandbox by its source address (which the firewall keeps honest). A query for a name the
// sandbox's rules deny, or which neither a rule nor its default egress allows, is REFUSED; any other
// goes to the upstream resolvers, and the addresses of an answer for a name an allow rule names are
// allowed to that sandbox for the answer's TTL (Firewall.Learn). Where those addresses lie does not
// matter: the firewall never lets a learned address open the host, a link-local address or another
// sandbox (DNS rebinding). AAAA queries get an empty answer: sandboxes have no IPv6.
type Forwarder struct {
	fw        *Firewall
	upstreams []string
	log       *slog.Logger
	client    *dns.Client

	mu      sync.RWMutex
	clients map[netip.Addr]forwardee

	udp, tcp *dns.Server
}

type forwardee struct {
	ifn   string
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

// NewForwarder starts the resolver on fw's gateway, port 53, forwarding to upstreams ("host:port").
// It binds before any link holds the gateway's address (IP_FREEBIND).
func NewForwarder(fw *Firewall, upstreams []string, log *slog.Logger) (*Forwarder, error) {
	if len(upstreams) == 0 {
		return nil, errors.New("dns: no upstream resolver")
	}
	f := &Forwarder{fw: fw, upstreams: upstreams, log: log, clients: map[netip.Addr]forwardee{},
		client: &dns.Client{Timeout: 2 * time.Second}}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_FREEBIND, 1) })
		return errors.Join(err, serr)
	}}
	addr := netip.AddrPortFrom(fw.gateway, 53).String()
	pc, err := lc.ListenPacket(context.Background(), "udp4", addr)
	if err != nil {
		return nil, fmt.Errorf("dns: %w", err)
	}
	ln, err := lc.Listen(context.Background(), "tcp4", addr)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("dns: %w", err)
	}
	f.udp = &dns.Server{PacketConn: pc, Handler: f}
	f.tcp = &dns.Server{Listener: ln, Handler: f, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		IdleTimeout: func() time.Duration { return 5 * time.Second }, MaxTCPQueries: 16}
	for _, s := range []*dns.Server{f.udp, f.tcp} {
		go s.ActivateAndServe()
	}
	return f, nil
}

// Close stops the resolver.
func (f *Forwarder) Close() error {
	return errors.Join(f.udp.Shutdown(), f.tcp.Shutdown())
}

// Set makes rules, whose epoch in the firewall is epoch (Firewall.Set's), those of the sandbox at
// addr, on host interface ifn. A query let through under the rules before learns nothing once they
// are replaced in the firewall: its answer is SERVFAIL, and the sandbox's next query meets the new
// rules.
func (f *Forwarder) Set(addr netip.Addr, ifn string, rules Rules, epoch uint64) {
	f.mu.Lock()
	c, ok := f.clients[addr]
	if !ok || c.ifn != ifn {
		c = forwardee{ifn: ifn, seen: &seen{names: map[netip.Addr]string{}}}
	}
	c.rules, c.epoch = rules, epoch
	f.clients[addr] = c
	f.mu.Unlock()
}

// Remove forgets the sandbox at addr.
func (f *Forwarder) Remove(addr netip.Addr) {
	f.mu.Lock()
	delete(f.clients, addr)
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
	if q.Qtype == dns.TypeAAAA {
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
		if a, ok := rr.(*dns.A); ok {
			if ip, ok := netip.AddrFromSlice(a.A.To4()); ok {
				addrs = append(addrs, ip)
				ttl = min(ttl, time.Duration(a.Hdr.Ttl)*time.Second)
			}
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
		ip, ok := netip.AddrFromSlice(a.IP.To4())
		return ip, ok
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(a.IP.To4())
		return ip, ok
	}
	return netip.Addr{}, false
}
