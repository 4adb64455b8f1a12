package httpapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandbox"
)

// Preview URLs: a listener of its own (PreviewHandler) passes requests on to one port of one
// sandbox, for whoever holds a token for it. A token names the sandbox, its generation, the port and
// when it expires, and is signed with HMAC-SHA256 under a key of the sandbox's generation, derived
// from the daemon's secret: a recreate (generation + 1) revokes every token of the generation before.

// PreviewConfig configures preview URLs.
type PreviewConfig struct {
	// Secret is the daemon's, from which each sandbox generation's key is derived; at least 32 bytes.
	Secret []byte
	// Addr is host:port at which clients reach the preview listener.
	Addr string
	// Domain, when set, routes host names {port}-{sandboxId}.{Domain} to the port; without it, only
	// the path form /p/{sandboxId}/{port}/... is served.
	Domain string
	// TLS says the listener serves HTTPS: the URLs minted are https. Whether a request came over TLS
	// decides its cookie's Secure and the HSTS header.
	TLS bool
	// Now is the clock; time.Now if nil.
	Now func() time.Time
}

// The names a token travels under.
const (
	previewParam  = "sandboxd_preview"
	previewCookie = "sandboxd_preview"
	previewHeader = "X-Sandboxd-Preview-Token"
)

// Over TLS the cookie takes a prefix a browser enforces: __Host- (Secure, Path=/, no Domain) for a
// host name of its own, which no sibling host can set or overwrite, and __Secure- for the path form.
// The token is looked for under all three names.
var previewCookies = []string{"__Host-" + previewCookie, "__Secure-" + previewCookie, previewCookie}

// previewHSTS is the Strict-Transport-Security of a preview answered over TLS: a year, this host only
// (includeSubDomains would bind hosts of the domain the daemon does not serve).
const previewHSTS = "max-age=31536000"

// Bounds of a token's life.
const (
	defaultPreviewTTL = time.Hour
	maxPreviewTTL     = 7 * 24 * time.Hour
)

func (c *PreviewConfig) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// key is the signing key of one sandbox generation.
func (c *PreviewConfig) key(ref sandbox.Ref) []byte {
	m := hmac.New(sha256.New, c.Secret)
	fmt.Fprintf(m, "sandboxd preview key\x00%s\x00%d", ref.ID, ref.Generation)
	return m.Sum(nil)
}

// sign returns the token for port of ref until exp.
func (c *PreviewConfig) sign(ref sandbox.Ref, port int, exp time.Time) string {
	claims := fmt.Sprintf("%s.%d.%d.%d", ref.ID, ref.Generation, port, exp.Unix())
	m := hmac.New(sha256.New, c.key(ref))
	m.Write([]byte(claims))
	return base64.RawURLEncoding.EncodeToString([]byte(claims)) + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// verify checks token for port of ref, the sandbox's current generation. Errors: ErrUnauthenticated.
func (c *PreviewConfig) verify(token string, ref sandbox.Ref, port int) error {
	bad := func(why string) error {
		return fmt.Errorf("preview token: %s: %w", why, sandbox.ErrUnauthenticated)
	}
	claimsB64, macB64, ok := strings.Cut(token, ".")
	if !ok || len(token) > 512 {
		return bad("malformed")
	}
	claims, err1 := base64.RawURLEncoding.DecodeString(claimsB64)
	mac, err2 := base64.RawURLEncoding.DecodeString(macB64)
	if err1 != nil || err2 != nil {
		return bad("malformed")
	}
	f := strings.Split(string(claims), ".")
	if len(f) != 4 {
		return bad("malformed")
	}
	gen, errG := strconv.ParseUint(f[1], 10, 64)
	exp, errE := strconv.ParseInt(f[3], 10, 64)
	if errG != nil || errE != nil {
		return bad("malformed")
	}
	switch {
	case f[0] != string(ref.ID):
		return bad("it is for another sandbox")
	case f[2] != strconv.Itoa(port):
		return bad("it is for another port")
	case sandbox.Generation(gen) != ref.Generation:
		return bad("it is of another generation of the sandbox")
	}
	m := hmac.New(sha256.New, c.key(ref))
	m.Write(claims)
	if !hmac.Equal(mac, m.Sum(nil)) {
		return bad("bad signature")
	}
	if !c.now().Before(time.Unix(exp, 0)) {
		return bad("expired")
	}
	return nil
}

// url is the preview URL of port of id, without the token.
func (c *PreviewConfig) url(id sandbox.ID, port int) string {
	scheme, defaultPort := "http://", "80"
	if c.TLS {
		scheme, defaultPort = "https://", "443"
	}
	if c.Domain == "" {
		return scheme + c.Addr + "/p/" + string(id) + "/" + strconv.Itoa(port) + "/"
	}
	host := strconv.Itoa(port) + "-" + string(id) + "." + c.Domain
	if _, p, err := net.SplitHostPort(c.Addr); err == nil && p != defaultPort {
		host += ":" + p
	}
	return scheme + host + "/"
}

// previewToken is the PreviewToken schema.
type previewToken struct {
	URL        string             `json:"url"`
	Token      string             `json:"token"`
	ExpiresAt  time.Time          `json:"expiresAt"`
	Port       int                `json:"port"`
	Generation sandbox.Generation `json:"generation"`
}

// createPreviewToken: POST /v1/sandboxes/{sandboxId}/ports/{port}/preview-tokens.
func (s *Server) createPreviewToken(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req struct {
		TTLSeconds int64 `json:"ttlSeconds"`
	}
	if err := decodeStrict(body, &req); err != nil {
		return err
	}
	ttl := defaultPreviewTTL
	if req.TTLSeconds > 0 {
		ttl = time.Duration(req.TTLSeconds) * time.Second
	}
	if ttl > maxPreviewTTL {
		return fmt.Errorf("ttlSeconds past %v: %w", maxPreviewTTL, sandbox.ErrInvalidRequest)
	}
	target, err := s.apiTarget(r)
	if err != nil {
		return err
	}
	if s.preview == nil {
		return fmt.Errorf("no preview listener is configured (--preview-listen): %w", sandbox.ErrUnsupportedCapability)
	}
	exp := s.preview.now().Add(ttl).Truncate(time.Second)
	tok := s.preview.sign(target.ref, target.port, exp)
	writeJSON(w, http.StatusCreated, previewToken{
		URL:   s.preview.url(target.ref.ID, target.port) + "?" + previewParam + "=" + tok,
		Token: tok, ExpiresAt: exp.UTC(), Port: target.port, Generation: target.ref.Generation,
	})
	return nil
}

// PreviewHandler serves preview URLs, for a listener of their own: {port}-{sandboxId}.{Domain} host
// names, and the path form /p/{sandboxId}/{port}/... It panics without Config.Preview.
func (s *Server) PreviewHandler() http.Handler {
	if s.preview == nil {
		panic("httpapi: PreviewHandler without Config.Preview")
	}
	return s.recoverer(http.HandlerFunc(s.servePreview))
}

func (s *Server) servePreview(w http.ResponseWriter, r *http.Request) {
	if r.TLS != nil {
		w.Header().Set("Strict-Transport-Security", previewHSTS)
	}
	if err := s.previewRequest(w, r); err != nil {
		if sandbox.ClassOf(err).Err == sandbox.ErrUnauthenticated && r.ContentLength != 0 {
			w.Header().Set("Connection", "close")
		}
		s.writeError(w, r, err)
	}
}

func (s *Server) previewRequest(w http.ResponseWriter, r *http.Request) error {
	id, portStr, path, cookiePath, err := s.previewRoute(r)
	if err != nil {
		return err
	}
	port, err := sandbox.ParsePort(portStr)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	fromQuery := q.Get(previewParam)
	var tokens []string
	if fromQuery != "" {
		tokens = []string{fromQuery}
	} else if h := r.Header.Get(previewHeader); h != "" {
		tokens = []string{h}
	} else {
		// Every cookie of the names, not the first: a cookie another host of the domain set for the
		// whole domain does not hide this host's own.
		for _, c := range r.Cookies() {
			if slices.Contains(previewCookies, c.Name) && c.Value != "" && len(tokens) < 8 {
				tokens = append(tokens, c.Value)
			}
		}
	}
	if len(tokens) == 0 {
		return fmt.Errorf("a preview URL needs its token: %w", sandbox.ErrUnauthenticated)
	}
	// Verified against the sandbox's current generation: a token of an earlier one is refused. An
	// unknown sandbox is refused alike, so that a guess learns nothing.
	ref, since, err := s.rt.PortTarget(r.Context(), id)
	if err != nil {
		if sandbox.ClassOf(err).Err == sandbox.ErrNotFound {
			return fmt.Errorf("preview token: no such sandbox: %w", sandbox.ErrUnauthenticated)
		}
		return err
	}
	for _, token := range tokens {
		if err = s.preview.verify(token, ref, port); err == nil {
			break
		}
	}
	if err != nil {
		return err
	}
	if fromQuery != "" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		// Once in the URL, then a cookie of this host (or this path): the token leaves the address bar.
		exp, _ := expiryOf(fromQuery)
		c := &http.Cookie{Name: previewCookie, Value: fromQuery, Path: cookiePath, HttpOnly: true,
			SameSite: http.SameSiteLaxMode, Expires: exp}
		if r.TLS != nil {
			c.Secure = true
			c.Name = "__Secure-" + previewCookie
			if cookiePath == "/" {
				c.Name = "__Host-" + previewCookie
			}
		}
		http.SetCookie(w, c)
		q.Del(previewParam)
		u := *r.URL
		u.RawQuery = q.Encode()
		http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
		return nil
	}
	q.Del(previewParam)
	s.ports.serve(w, r, &proxied{
		target:   portTarget{ref: ref, port: port, since: since},
		path:     path,
		rawQuery: q.Encode(),
		strip:    stripPreviewToken,
	})
	return nil
}

// previewRoute finds the sandbox, port and path a preview request names, and the path its cookie is
// scoped to.
func (s *Server) previewRoute(r *http.Request) (id sandbox.ID, port, path, cookiePath string, err error) {
	host := strings.ToLower(r.Host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if d := s.preview.Domain; d != "" && strings.HasSuffix(host, "."+strings.ToLower(d)) {
		label := strings.TrimSuffix(host, "."+strings.ToLower(d))
		p, sid, ok := strings.Cut(label, "-")
		if !ok || strings.Contains(label, ".") || sid == "" {
			return "", "", "", "", fmt.Errorf("preview host %q is not {port}-{sandboxId}.%s: %w", clip(host), d, sandbox.ErrNotFound)
		}
		return sandbox.ID(sid), p, r.URL.EscapedPath(), "/", nil
	}
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/p/")
	if !ok {
		return "", "", "", "", fmt.Errorf("no preview at %q: %w", clip(r.URL.Path), sandbox.ErrNotFound)
	}
	sid, rest, _ := strings.Cut(rest, "/")
	p, rest, found := strings.Cut(rest, "/")
	if sid == "" || p == "" || !found {
		return "", "", "", "", fmt.Errorf("a preview path is /p/{sandboxId}/{port}/...: %w", sandbox.ErrNotFound)
	}
	if u, err := url.PathUnescape(sid); err == nil {
		sid = u
	}
	return sandbox.ID(sid), p, "/" + rest, "/p/" + sid + "/" + p + "/", nil
}

// expiryOf reads the expiry of a token already verified.
func expiryOf(token string) (time.Time, bool) {
	claimsB64, _, _ := strings.Cut(token, ".")
	claims, err := base64.RawURLEncoding.DecodeString(claimsB64)
	if err != nil {
		return time.Time{}, false
	}
	f := strings.Split(string(claims), ".")
	exp, err := strconv.ParseInt(f[len(f)-1], 10, 64)
	return time.Unix(exp, 0), err == nil
}

// stripPreviewToken removes the token from what the sandbox's server is sent: its header and its
// cookie.
func stripPreviewToken(h http.Header) {
	h.Del(previewHeader)
	cookies := h.Values("Cookie")
	if len(cookies) == 0 {
		return
	}
	h.Del("Cookie")
	var keep []string
	for _, line := range cookies {
		for _, c := range strings.Split(line, ";") {
			if name, _, _ := strings.Cut(strings.TrimSpace(c), "="); !slices.Contains(previewCookies, name) && strings.TrimSpace(c) != "" {
				keep = append(keep, strings.TrimSpace(c))
			}
		}
	}
	if len(keep) > 0 {
		h.Set("Cookie", strings.Join(keep, "; "))
	}
}
