package httpapi

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/sandboxd/sandbox"
)

// A web page can reach a daemon on loopback: through a name it controls that it points at 127.0.0.1
// (DNS rebinding), or with a request to 127.0.0.1 itself that it cannot read the answer of but that
// still runs (a cross-site form POST). The first carries the page's own name in Host, the second its
// origin in Origin and Sec-Fetch-Site. So every request names in Host a host this API serves, and a
// browser's request comes from that same host.

// hostPort is a host as a request names it: an IP address or else a lower-case name, and a port (0 when
// the request names none, or for an allowed host: any).
type hostPort struct {
	name string
	ip   netip.Addr
	port uint16
}

// parseHostPort reads "name", "name:port", "1.2.3.4", "1.2.3.4:port", "[::1]" or "[::1]:port".
func parseHostPort(s string) (hostPort, error) {
	var h hostPort
	host := s
	if i := strings.LastIndexByte(s, ':'); i >= 0 && i > strings.LastIndexByte(s, ']') {
		host = s[:i]
		if port := s[i+1:]; port != "" {
			n, err := strconv.ParseUint(port, 10, 16)
			if err != nil || n == 0 || port[0] == '0' {
				return hostPort{}, fmt.Errorf("port %q is not a port number", port)
			}
			h.port = uint16(n)
		}
	}
	if v6, ok := strings.CutPrefix(host, "["); ok {
		v6, ok = strings.CutSuffix(v6, "]")
		ip, err := netip.ParseAddr(v6)
		if !ok || err != nil || !ip.Is6() {
			return hostPort{}, fmt.Errorf("%q is not a bracketed IPv6 address", host)
		}
		h.ip = ip.Unmap()
		return h, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Is6() {
			return hostPort{}, fmt.Errorf("an IPv6 address is written in brackets: [%s]", host)
		}
		h.ip = ip
		return h, nil
	}
	if !validHostName(host) {
		return hostPort{}, fmt.Errorf("%q is not a host name", host)
	}
	h.name = strings.ToLower(host)
	return h, nil
}

// sameHost reports whether a and b name the same host, whatever their ports.
func (a hostPort) sameHost(b hostPort) bool { return a.name == b.name && a.ip == b.ip }

// validHostName reports whether s is a DNS name: dot-separated labels of letters, digits, '-' and '_'.
func validHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// CheckAllowedHost reports whether s can be one of Config.AllowedHosts: a host name or IP address,
// with or without a port.
func CheckAllowedHost(s string) error {
	_, err := parseHostPort(s)
	return err
}

// The names of a loopback listener besides its own address.
var (
	localhost = hostPort{name: "localhost"}
	loopback4 = hostPort{ip: netip.AddrFrom4([4]byte{127, 0, 0, 1})}
	loopback6 = hostPort{ip: netip.IPv6Loopback()}
)

// servesHost reports whether h is a host this server answers to on the connection r came in on: the
// address the client connected to, with its port; for a loopback address, localhost, 127.0.0.1 and
// [::1] with that port; and the allowed hosts, on any port unless one is given. A request that names no
// port names port 80.
func (s *Server) servesHost(r *http.Request, h hostPort) bool {
	if h.port == 0 {
		h.port = 80
	}
	for _, a := range s.allowedHosts {
		if a.sameHost(h) && (a.port == 0 || a.port == h.port) {
			return true
		}
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr)
	if !ok || local.Port != int(h.port) {
		return false
	}
	ip, ok := netip.AddrFromSlice(local.IP)
	if !ok {
		return false
	}
	ip = ip.Unmap()
	return h.ip == ip || ip.IsLoopback() && (h.sameHost(localhost) || h.sameHost(loopback4) || h.sameHost(loopback6))
}

// checkHostAndOrigin refuses, as ErrInvalidRequest, a request whose Host this server does not serve, or
// that a browser sent from a page of another origin: an Origin that is not http(s) on a served host, or a
// Sec-Fetch-Site of cross-site or same-site (a browser's request without Origin, like an image's).
func (s *Server) checkHostAndOrigin(r *http.Request) error {
	h, err := parseHostPort(r.Host)
	if err != nil || !s.servesHost(r, h) {
		return fmt.Errorf("Host %q is not a host this API serves: %w", clip(r.Host), sandbox.ErrInvalidRequest)
	}
	if origins, ok := r.Header["Origin"]; ok {
		if len(origins) != 1 {
			return fmt.Errorf("%d Origin headers: %w", len(origins), sandbox.ErrInvalidRequest)
		}
		if err := s.checkSameOrigin(r, origins[0]); err != nil {
			return fmt.Errorf("Origin %q: %v: requests from web pages of other origins are refused: %w",
				clip(origins[0]), err, sandbox.ErrInvalidRequest)
		}
	}
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "cross-site", "same-site":
		return fmt.Errorf("Sec-Fetch-Site %q: requests from web pages of other origins are refused: %w",
			site, sandbox.ErrInvalidRequest)
	}
	return nil
}

// checkSameOrigin checks that origin is http or https on a host this server serves.
func (s *Server) checkSameOrigin(r *http.Request, origin string) error {
	u, err := url.Parse(origin)
	if err != nil || u.Opaque != "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Host == "" {
		return errors.New("not an origin")
	}
	h, err := parseHostPort(u.Host)
	if err != nil {
		return err
	}
	switch {
	case u.Scheme == "https" && h.port == 0:
		h.port = 443
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("not an http origin")
	}
	if !s.servesHost(r, h) {
		return errors.New("not a host this API serves")
	}
	return nil
}

// clip shortens a client's string for an error message.
func clip(s string) string {
	const most = 200
	if len(s) <= most {
		return s
	}
	return s[:most] + "..."
}

// originGuard puts checkHostAndOrigin in front of every request, before routing: a request for a host
// this server does not serve learns nothing of its routes.
func (s *Server) originGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.checkHostAndOrigin(r); err != nil {
			if r.ContentLength != 0 {
				w.Header().Set("Connection", "close") // as for a missing token: nobody will read the body
			}
			s.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}
