package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/httpapi"
)

// PortFlags are the settings of the ports proxy and of preview URLs.
type PortFlags struct {
	PreviewListen   string        // address of the preview listener; empty: no preview URLs
	PreviewDomain   string        // host names {port}-{id}.{domain} are routed; empty: the path form only
	PreviewTLSCert  string        // PEM certificate chain of the preview listener; with PreviewTLSKey, HTTPS
	PreviewTLSKey   string        // PEM private key of PreviewTLSCert
	ResponseTimeout time.Duration // how long a sandbox's server may take to answer a proxied request's headers

	cert     *previewCert // nil: plain http
	server   *http.Server
	listener net.Listener
	served   chan error
}

func (p *PortFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.PreviewListen, "preview-listen", p.PreviewListen, "address of the preview URL listener, which serves sandboxes' ports to holders of preview tokens (empty: off)")
	fs.StringVar(&p.PreviewDomain, "preview-domain", p.PreviewDomain, "domain whose host names {port}-{sandboxId}.DOMAIN the preview listener routes (empty: only its path form /p/{sandboxId}/{port}/)")
	fs.StringVar(&p.PreviewTLSCert, "preview-tls-cert", p.PreviewTLSCert, "PEM certificate (chain) the preview listener serves HTTPS with, read again when it changes and on SIGHUP; needs --preview-tls-key")
	fs.StringVar(&p.PreviewTLSKey, "preview-tls-key", p.PreviewTLSKey, "PEM private key of --preview-tls-cert")
	fs.DurationVar(&p.ResponseTimeout, "port-response-timeout", httpapi.DefaultPortResponseTimeout, "how long a sandbox's server may take to answer the headers of a request passed on to one of its ports")
}

// check validates the flags once parsed.
func (p *PortFlags) check() error {
	if p.ResponseTimeout <= 0 {
		return fmt.Errorf("--port-response-timeout must be positive, got %v", p.ResponseTimeout)
	}
	if p.PreviewDomain != "" {
		if p.PreviewListen == "" {
			return errors.New("--preview-domain needs --preview-listen")
		}
		d := p.PreviewDomain
		if strings.HasPrefix(d, ".") || strings.HasSuffix(d, ".") || strings.ContainsAny(d, " /:_") || d != strings.ToLower(d) {
			return fmt.Errorf("--preview-domain %q is not a lower-case domain name", d)
		}
	}
	if p.PreviewListen != "" {
		if _, _, err := net.SplitHostPort(p.PreviewListen); err != nil {
			return fmt.Errorf("--preview-listen %q: %v", p.PreviewListen, err)
		}
	}
	if (p.PreviewTLSCert == "") != (p.PreviewTLSKey == "") {
		return errors.New("--preview-tls-cert and --preview-tls-key go together")
	}
	if p.PreviewTLSCert != "" && p.PreviewListen == "" {
		return errors.New("--preview-tls-cert needs --preview-listen")
	}
	return nil
}

// loadTLS reads the preview listener's certificate and key, when set, so that a bad pair stops the
// daemon before anything starts; they are read again on SIGHUP and whenever either file changes.
func (p *PortFlags) loadTLS(log *slog.Logger) error {
	if p.PreviewTLSCert == "" {
		return nil
	}
	c, err := openPreviewCert(p.PreviewTLSCert, p.PreviewTLSKey, p.PreviewDomain, log)
	if err != nil {
		return err
	}
	p.cert = c
	return nil
}

// open starts listening for previews when they are on, and returns their configuration; nil when off.
// The secret tokens are signed under is the data directory's preview.key, made on first use, so that
// a token outlives a restart of the daemon.
func (p *PortFlags) open(dataDir string) (*httpapi.PreviewConfig, error) {
	if p.PreviewListen == "" {
		return nil, nil
	}
	secret, err := previewSecret(filepath.Join(dataDir, "preview.key"))
	if err != nil {
		return nil, fmt.Errorf("preview secret: %w", err)
	}
	ln, err := net.Listen("tcp", p.PreviewListen)
	if err != nil {
		return nil, fmt.Errorf("--preview-listen: %w", err)
	}
	p.listener = ln
	return &httpapi.PreviewConfig{Secret: secret, Addr: ln.Addr().String(), Domain: p.PreviewDomain, TLS: p.cert != nil}, nil
}

// serve serves the previews of api on the listener open made.
func (p *PortFlags) serve(api *httpapi.Server, readHeader, idle time.Duration, h slog.Handler) {
	if p.listener == nil {
		return
	}
	p.server = &http.Server{Handler: api.PreviewHandler(), ReadHeaderTimeout: readHeader, IdleTimeout: idle,
		ErrorLog: slog.NewLogLogger(h, slog.LevelWarn)}
	p.served = make(chan error, 1)
	if p.cert == nil {
		go func() { p.served <- p.server.Serve(p.listener) }()
		return
	}
	// HTTP/1.1 only (an empty TLSNextProto): a WebSocket is passed on as over plain http.
	p.server.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: p.cert.get}
	p.server.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	go func() { p.served <- p.server.ServeTLS(p.listener, "", "") }()
}

// PreviewAddr is the address of the preview listener, once Run has returned; empty when off.
func (m *Main) PreviewAddr() string {
	if m.Ports.listener == nil {
		return ""
	}
	return m.Ports.listener.Addr().String()
}

// close stops the preview listener within ctx.
func (p *PortFlags) close(ctx context.Context) error {
	if p.cert != nil {
		p.cert.stop()
		p.cert = nil
	}
	if p.server == nil {
		if p.listener != nil {
			p.listener.Close()
		}
		return nil
	}
	err := p.server.Shutdown(ctx)
	if err != nil {
		p.server.Close()
	}
	if serr := <-p.served; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	p.server, p.listener = nil, nil
	return err
}

// previewSecret reads the secret at path, making it (32 random bytes, mode 0600) when there is none.
func previewSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if len(b) < 32 {
			return nil, fmt.Errorf("%s holds %d bytes, fewer than 32", path, len(b))
		}
		return b, nil
	}
	if !os.IsNotExist(err) {
		return nil, err
	}
	b = make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, err
	}
	return b, nil
}
