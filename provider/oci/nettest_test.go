package oci_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netns"

	"github.com/sandboxd/sandbox/provider/oci"
)

// internet is a test's stand-in for the world outside the machine: a network namespace the test makes,
// joined to the host by a veth pair, with HTTP servers on addresses no other machine has. The host
// routes to them through the veth only; nothing the tests send leaves the machine.
//
//	host end: 198.18.K.1/30 (uplink)       the namespace's end: 198.18.K.2/30 (server)
//	a second server at 198.19.K.2, routed through the namespace, for rules that tell two nets apart
//	169.254.169.254, the cloud metadata address, routed to the namespace too: a rule that failed
//	open would reach the test's server there, never a real one.
//
// And over IPv6, in the documentation prefix:
//
//	host end: 2001:db8:K::1/64                the namespace's end: 2001:db8:K::2/64 (server6)
//	other6 at 2001:db8:K:1::2, routed through the namespace; the clouds' IPv6 metadata address
//	fd00:ec2::254 and translated, the NAT64 form of the server's IPv4 address (64:ff9b::198.18.K.2),
//	routed to it too, each with a server of its own.
type internet struct {
	ns       string
	uplink   string // the host's end
	hostAddr netip.Addr
	server   netip.Addr // 198.18.K.2
	other    netip.Addr // 198.19.K.2
	metadata netip.Addr

	hostAddr6, server6, other6, metadata6, translated netip.Addr

	k byte
	// A query for slow.test is told on slowAsked (which holds one), then answered once a test sends
	// on slowGo, or after 1.5 s: an upstream that is slow when a test wants it to be.
	slowAsked, slowGo chan struct{}
}

func ipCmd(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// newInternet makes the namespace, its link and servers, all removed when the test ends. Each HTTP
// server answers "NAME" for its name on port 80.
func newInternet(t testing.TB) *internet {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("the network tests need iproute2's ip (scripts/test installs it)")
	}
	var rnd [3]byte
	rand.Read(rnd[:])
	tag := hex.EncodeToString(rnd[:])
	k := rnd[0]
	in := &internet{ns: "sbxtest-" + tag, uplink: "ti" + tag, k: k,
		hostAddr: netip.AddrFrom4([4]byte{198, 18, k, 1}), server: netip.AddrFrom4([4]byte{198, 18, k, 2}),
		other: netip.AddrFrom4([4]byte{198, 19, k, 2}), metadata: netip.MustParseAddr("169.254.169.254"),
		slowAsked: make(chan struct{}, 1), slowGo: make(chan struct{})}
	in.hostAddr6 = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, k, 15: 1})
	in.server6 = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, k, 15: 2})
	in.other6 = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, k, 0, 1, 15: 2})
	in.metadata6 = netip.MustParseAddr("fd00:ec2::254")
	in.translated = netip.AddrFrom16([16]byte{0, 0x64, 0xff, 0x9b, 12: 198, 18, k, 2})
	ipCmd(t, "netns", "add", in.ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", in.ns).Run() })
	ipCmd(t, "link", "add", in.uplink, "type", "veth", "peer", "name", "eth0", "netns", in.ns)
	t.Cleanup(func() { exec.Command("ip", "link", "del", in.uplink).Run() })
	ipCmd(t, "addr", "add", in.hostAddr.String()+"/30", "dev", in.uplink)
	ipCmd(t, "addr", "add", in.hostAddr6.String()+"/64", "dev", in.uplink, "nodad")
	ipCmd(t, "link", "set", in.uplink, "up")
	for _, args := range [][]string{
		{"addr", "add", in.server.String() + "/30", "dev", "eth0"},
		{"addr", "add", in.other.String() + "/32", "dev", "eth0"},
		{"addr", "add", in.metadata.String() + "/32", "dev", "eth0"},
		{"addr", "add", in.server6.String() + "/64", "dev", "eth0", "nodad"},
		{"addr", "add", in.other6.String() + "/128", "dev", "eth0", "nodad"},
		{"addr", "add", in.metadata6.String() + "/128", "dev", "eth0", "nodad"},
		{"addr", "add", in.translated.String() + "/128", "dev", "eth0", "nodad"},
		{"link", "set", "eth0", "up"},
		{"link", "set", "lo", "up"},
		// Replies to the sandboxes' masqueraded connections go back to the host's end.
		{"route", "add", "default", "via", in.hostAddr.String()},
		{"-6", "route", "add", "default", "via", in.hostAddr6.String()},
	} {
		ipCmd(t, append([]string{"-n", in.ns}, args...)...)
	}
	ipCmd(t, "route", "add", netip.PrefixFrom(in.other, 24).Masked().String(), "via", in.server.String(), "dev", in.uplink)
	t.Cleanup(func() {
		exec.Command("ip", "route", "del", netip.PrefixFrom(in.other, 24).Masked().String()).Run()
	})
	ipCmd(t, "route", "add", in.metadata.String()+"/32", "via", in.server.String(), "dev", in.uplink)
	t.Cleanup(func() { exec.Command("ip", "route", "del", in.metadata.String()+"/32").Run() })
	for _, a := range []netip.Addr{in.other6, in.metadata6, in.translated} {
		// replace: the metadata address's route may be another test's, whose uplink takes it along.
		ipCmd(t, "-6", "route", "replace", a.String()+"/128", "via", in.server6.String(), "dev", in.uplink)
	}
	for name, a := range map[string]netip.Addr{"server": in.server, "other": in.other, "metadata": in.metadata,
		"server6": in.server6, "other6": in.other6, "metadata6": in.metadata6, "translated": in.translated} {
		in.serve(t, name, netip.AddrPortFrom(a, 80))
	}
	in.serveDNS(t)
	return in
}

// names are the test's DNS names, with the address each answers.
func (in *internet) names() map[string]netip.Addr {
	return map[string]netip.Addr{
		"allowed.test.":       in.server,
		"other.test.":         in.other,
		"wild.test.":          in.other, // the apex of *.wild.test
		"sub.wild.test.":      in.server,
		"deep.sub.wild.test.": in.server,
		"denied.wild.test.":   in.server,
		"rebind.test.":        in.metadata, // an allowed name answering a link-local address
		"host.test.":          in.hostAddr, // ... or the host's own
		"slow.test.":          in.other,    // answered when the test says
	}
}

// names6 are the test's names with an IPv6 address (AAAA), with the address each answers: an allowed
// name's, and allowed names answering what no answer may open (DNS rebinding).
func (in *internet) names6() map[string]netip.Addr {
	return map[string]netip.Addr{
		"allowed.test.":    in.server6,
		"other.test.":      in.other6,
		"sub.wild.test.":   in.server6,
		"loop6.test.":      netip.MustParseAddr("::1"),
		"ll6.test.":        netip.MustParseAddr("fe80::1"),
		"host6.test.":      in.hostAddr6, // the host's own
		"meta6.test.":      in.metadata6,
		"nat64.test.":      in.translated,                           // the server's IPv4 address, through NAT64
		"mapped.test.":     netip.MustParseAddr("::ffff:127.0.0.1"), // IPv4-mapped
		"mappedmeta.test.": netip.AddrFrom16(in.metadata.As16()),    // ::ffff:169.254.169.254
	}
}

// serveDNS answers the test's names (TTL 1 s: every answer is asked again) on the server's address,
// port 53, over UDP and TCP.
func (in *internet) serveDNS(t testing.TB) {
	t.Helper()
	names, names6 := in.names(), in.names6()
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		if len(req.Question) == 1 {
			q := req.Question[0]
			if strings.ToLower(q.Name) == "slow.test." {
				select {
				case in.slowAsked <- struct{}{}:
				default:
				}
				select {
				case <-in.slowGo:
				case <-time.After(1500 * time.Millisecond):
				}
			}
			a, ok := names[strings.ToLower(q.Name)]
			a6, ok6 := names6[strings.ToLower(q.Name)]
			switch {
			case ok && q.Qtype == dns.TypeA:
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1}, A: a.AsSlice()})
			case ok6 && q.Qtype == dns.TypeAAAA:
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: 1}, AAAA: a6.AsSlice()})
			case !ok && !ok6:
				m.Rcode = dns.RcodeNameError
			}
		}
		w.WriteMsg(m)
	})
	target, err := netns.GetFromName(in.ns)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	addr := netip.AddrPortFrom(in.server, 53).String()
	var pc net.PacketConn
	var ln net.Listener
	inNamespace(t, target, func() {
		if pc, err = net.ListenPacket("udp4", addr); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp4", addr); err != nil {
			t.Fatal(err)
		}
	})
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: handler}, {Listener: ln, Handler: handler}} {
		go srv.ActivateAndServe()
		t.Cleanup(func() { srv.Shutdown() })
	}
}

// serve answers name over HTTP on ap inside the namespace.
func (in *internet) serve(t testing.TB, name string, ap netip.AddrPort) {
	t.Helper()
	ln := in.listen(t, ap.String())
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// /bytes/N answers N zero bytes, for the throughput benchmarks.
		if n, err := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/bytes/"), 10, 64); err == nil && n <= 1<<30 {
			w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
			io.CopyN(w, zeros{}, n)
			return
		}
		// /sink reads what is sent and answers how much.
		if r.URL.Path == "/sink" {
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprint(w, n)
			return
		}
		fmt.Fprint(w, name)
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) { clear(b); return len(b), nil }

// listen opens a TCP listener inside the namespace.
func (in *internet) listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	target, err := netns.GetFromName(in.ns)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	var ln net.Listener
	inNamespace(t, target, func() {
		if ln, err = net.Listen("tcp", addr); err != nil {
			t.Fatal(err)
		}
	})
	return ln
}

// hostServer answers name over HTTP on addr in the host's namespace, until the test ends; it returns
// the port.
func hostServer(t testing.TB, name, addr string) int {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// /sink reads what is sent and answers how much.
		if r.URL.Path == "/sink" {
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprint(w, n)
			return
		}
		fmt.Fprint(w, name)
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// pool is a test provider's address pool, apart from the internet's; pool6 its IPv6 one.
func (in *internet) pool() netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 231, in.k, 0}), 24)
}

func (in *internet) pool6() netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0xb5, 0x5b, 0x0a, 0, 0, 0, in.k}), 64)
}

// inNetns runs fn on a thread in the network namespace of process pid.
func inNetns(t testing.TB, pid int, fn func()) {
	t.Helper()
	target, err := netns.GetFromPid(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	inNamespace(t, target, fn)
}

// inNamespace runs fn on a thread in the network namespace target.
func inNamespace(t testing.TB, target netns.NsHandle, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	if err := netns.Set(target); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(err) // the thread would stay in the other namespace
		}
	}()
	fn()
}

// config is the network configuration of a provider whose world outside is in.
func (in *internet) config() oci.NetworkConfig {
	return oci.NetworkConfig{Pool: in.pool(), Pool6: in.pool6(), Uplinks: []string{in.uplink},
		Resolvers: []string{netip.AddrPortFrom(in.server, 53).String()}}
}

// ticker is a server of the internet that keeps flows going: a datagram to its UDP port makes it send
// "tick" back to the sender every 100 ms, and a connection to its TCP port is sent "tick" every 100
// ms, until the test ends. It counts what it receives.
type ticker struct {
	udp, tcp netip.AddrPort

	mu        sync.Mutex
	datagrams int // received
	peers     int // senders of datagrams
	conns     int // accepted
}

// newTicker starts a ticker on the internet's server address, UDP and TCP port 9999.
func (in *internet) newTicker(t testing.TB) *ticker {
	t.Helper()
	tk := &ticker{udp: netip.AddrPortFrom(in.server, 9999), tcp: netip.AddrPortFrom(in.server, 9999)}
	target, err := netns.GetFromName(in.ns)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	var pc net.PacketConn
	inNamespace(t, target, func() {
		if pc, err = net.ListenPacket("udp4", tk.udp.String()); err != nil {
			t.Fatal(err)
		}
	})
	ln := in.listen(t, tk.tcp.String())
	done := make(chan struct{})
	t.Cleanup(func() { close(done); pc.Close(); ln.Close() })
	// every calls send every 100 ms until the test ends or send fails.
	every := func(send func() error) {
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if send() != nil {
				return
			}
		}
	}
	go func() {
		seen := map[string]bool{}
		buf := make([]byte, 1500)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			tk.mu.Lock()
			tk.datagrams++
			if !seen[from.String()] {
				seen[from.String()] = true
				tk.peers++
				// An error (an ICMP unreachable told) does not stop it: the flow goes on while the test does.
				go every(func() error { pc.WriteTo([]byte("tick"), from); return nil })
			}
			tk.mu.Unlock()
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tk.mu.Lock()
			tk.conns++
			tk.mu.Unlock()
			go func() {
				defer c.Close()
				every(func() error {
					c.SetWriteDeadline(time.Now().Add(time.Second))
					if _, err := c.Write([]byte("tick")); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
						return err
					}
					return nil
				})
			}()
		}
	}()
	return tk
}

// counts returns the datagrams received, their senders and the connections accepted.
func (tk *ticker) counts() (datagrams, peers, conns int) {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	return tk.datagrams, tk.peers, tk.conns
}
