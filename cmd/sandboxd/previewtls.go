package main

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// previewCert is the preview listener's certificate. Each handshake looks at both files (two stats,
// against a handshake's milliseconds) and reads them again when either changed; SIGHUP reads them
// again too. A pair that fails to load (a certificate written before its key, say) leaves the one in
// force and is logged once.
type previewCert struct {
	certFile, keyFile, domain string
	log                       *slog.Logger

	mu     sync.Mutex
	cert   *tls.Certificate
	stamps [2]fileStamp // of the files when last read, whether or not the pair loaded

	hup     chan os.Signal
	done    chan struct{}
	stopped chan struct{}
}

// fileStamp tells a file's versions apart: a rename over it changes the inode, a write its size or time.
type fileStamp struct {
	mod  time.Time
	size int64
	ino  uint64
}

func stampOf(path string) fileStamp {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	s := fileStamp{mod: st.ModTime(), size: st.Size()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.ino = sys.Ino
	}
	return s
}

// openPreviewCert loads the pair, or says which flag's file is wrong, and watches for SIGHUP.
func openPreviewCert(certFile, keyFile, domain string, log *slog.Logger) (*previewCert, error) {
	c := &previewCert{certFile: certFile, keyFile: keyFile, domain: domain, log: log}
	c.stamps = [2]fileStamp{stampOf(certFile), stampOf(keyFile)}
	cert, err := c.load()
	if err != nil {
		return nil, err
	}
	c.cert = cert
	c.hup, c.done, c.stopped = make(chan os.Signal, 1), make(chan struct{}), make(chan struct{})
	signal.Notify(c.hup, syscall.SIGHUP)
	go func() {
		defer close(c.stopped)
		for {
			select {
			case <-c.done:
				return
			case <-c.hup:
				c.mu.Lock()
				c.reload([2]fileStamp{stampOf(certFile), stampOf(keyFile)})
				c.mu.Unlock()
			}
		}
	}()
	return c, nil
}

// load reads and checks the pair. A certificate out of its validity or not naming the preview
// domain's hosts is loaded with a warning: browsers will refuse it, but the daemon still starts.
func (c *previewCert) load() (*tls.Certificate, error) {
	for _, f := range []struct{ flag, path string }{{"--preview-tls-cert", c.certFile}, {"--preview-tls-key", c.keyFile}} {
		if _, err := os.Stat(f.path); err != nil {
			return nil, fmt.Errorf("%s: %w", f.flag, err)
		}
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--preview-tls-cert %s with --preview-tls-key %s: %w", c.certFile, c.keyFile, err)
	}
	leaf := cert.Leaf
	now := time.Now()
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		c.log.Warn("the preview certificate is not valid now", "file", c.certFile, "not_before", leaf.NotBefore, "not_after", leaf.NotAfter)
	}
	if c.domain != "" {
		if err := leaf.VerifyHostname("80-sbx_x." + c.domain); err != nil {
			c.log.Warn("the preview certificate does not name the preview hosts (*."+c.domain+")", "file", c.certFile, "err", err)
		}
	}
	return &cert, nil
}

// reload reads the pair again when the files' stamps differ from those last read. c.mu held.
func (c *previewCert) reload(now [2]fileStamp) {
	if now == c.stamps {
		return
	}
	c.stamps = now
	cert, err := c.load()
	if err != nil {
		c.log.Error("preview certificate reload failed; the previous one stays in force", "err", err)
		return
	}
	c.cert = cert
	c.log.Info("preview certificate reloaded", "file", c.certFile, "not_after", cert.Leaf.NotAfter)
}

// get is the listener's tls.Config.GetCertificate.
func (c *previewCert) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	now := [2]fileStamp{stampOf(c.certFile), stampOf(c.keyFile)}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reload(now)
	return c.cert, nil
}

// stop ends the watch for SIGHUP.
func (c *previewCert) stop() {
	signal.Stop(c.hup)
	close(c.done)
	<-c.stopped
}
