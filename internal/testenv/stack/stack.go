// Package stack wires the daemon's layers for tests: a SQLite store, a provider and the runtime core
// (package corestack), and the HTTP API on a loopback test server over them, as `sandboxd serve` does.
// Everything it makes is closed when the test ends, the outer layers first, before what the test
// registered earlier (a provider's release). Only tests import it.
package stack

import (
	"net/http/httptest"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/httpapi"
	"github.com/sandboxd/sandbox/internal/testenv/corestack"
	"github.com/sandboxd/sandbox/store/sqlite"
)

// Stack is the wired daemon of one test.
type Stack struct {
	URL     string // the API's base URL, http://127.0.0.1:port
	API     *httpapi.Server
	Runtime *core.Runtime
	Store   *sqlite.Store

	inner *corestack.Stack
	srv   *httptest.Server
}

// Option changes what New wires.
type Option func(*config)

type config struct {
	inner []corestack.Option
	api   httpapi.Config
}

// Store opens the store with cfg; by default it is a file in the test's temporary directory.
func Store(cfg sqlite.Config) Option {
	return func(c *config) { c.inner = append(c.inner, corestack.Store(cfg)) }
}

// StoreConfig lets f change the store's configuration.
func StoreConfig(f func(*sqlite.Config)) Option {
	return func(c *config) { c.inner = append(c.inner, corestack.StoreConfig(f)) }
}

// Core lets f change the runtime's configuration; New sets its Store and Provider.
func Core(f func(*core.Config)) Option {
	return func(c *config) { c.inner = append(c.inner, corestack.Core(f)) }
}

// API lets f change the HTTP API's configuration; New sets its Runtime.
func API(f func(*httpapi.Config)) Option { return func(c *config) { f(&c.api) } }

// Unstarted leaves the runtime's Start (the start-up reconcile and the periodic one) to the test.
func Unstarted() Option { return func(c *config) { c.inner = append(c.inner, corestack.Unstarted()) } }

// New wires a stack over prov and closes it when the test ends.
func New(t testing.TB, prov sandbox.Provider, opts ...Option) *Stack {
	t.Helper()
	s, err := Start(t.TempDir(), prov, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Start is New for a stack that outlives a test (a TestMain's, for examples): the store is a file in
// dir unless an option names one, and Close stops it.
func Start(dir string, prov sandbox.Provider, opts ...Option) (*Stack, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	inner, err := corestack.Open(dir, prov, c.inner...)
	if err != nil {
		return nil, err
	}
	c.api.Runtime = inner.Runtime
	api := httpapi.New(c.api)
	srv := httptest.NewServer(api)
	return &Stack{URL: srv.URL, API: api, Runtime: inner.Runtime, Store: inner.Store, inner: inner, srv: srv}, nil
}

// Close stops the API, ending its event streams, which the server's close waits for, then the runtime
// and the store.
func (s *Stack) Close() {
	s.API.Close()
	s.srv.Close()
	_ = s.inner.Close()
}
