package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sandboxd/sandbox/httpapi"
)

// isLoopback reports whether a listen address can only be reached from this host: an IP loopback address
// or the name localhost. An empty host (":4311") listens on every interface and is not loopback.
func isLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkAuthNeeded refuses a listen address reachable from other hosts without a token file.
func (m *Main) checkAuthNeeded() error {
	if m.AuthTokenFile == "" && !isLoopback(m.Listen) {
		return fmt.Errorf("--listen %s is reachable from other hosts: set --auth-token-file (one bearer token per line)", m.Listen)
	}
	return nil
}

// openTokens loads the token file, when one is set, and reloads it on every SIGHUP until stop is called.
// A reload that fails keeps the tokens in force and is logged.
func (m *Main) openTokens() (toks *httpapi.Tokens, stop func(), err error) {
	if m.AuthTokenFile == "" {
		return nil, func() {}, nil
	}
	toks = &httpapi.Tokens{}
	if err := toks.Load(m.AuthTokenFile); err != nil {
		return nil, nil, fmt.Errorf("--auth-token-file: %w", err)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-hup:
				if err := toks.Load(m.AuthTokenFile); err != nil {
					m.log.Error("token reload failed; the previous tokens stay in force", "err", err)
					continue
				}
				m.log.Info("tokens reloaded", "file", m.AuthTokenFile)
			}
		}
	}()
	return toks, func() {
		signal.Stop(hup)
		close(done)
		<-stopped
	}, nil
}
