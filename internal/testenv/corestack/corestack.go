// Package corestack wires the daemon's inner layers for tests: a SQLite store, a provider and the
// runtime core over them, as `sandboxd serve` does, without the HTTP API (package stack adds it). The
// API's own tests, which package stack cannot serve without importing the API into itself, take their
// runtime from here. Only tests import it.
package corestack

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/store/sqlite"
)

// Stack is a runtime over a store.
type Stack struct {
	Runtime *core.Runtime
	Store   *sqlite.Store
}

// Option changes what New and Open wire.
type Option func(*config)

type config struct {
	store   sqlite.Config
	core    core.Config
	unstart bool
}

// Store opens the store with cfg; by default it is a file in the test's temporary directory.
func Store(cfg sqlite.Config) Option { return func(c *config) { c.store = cfg } }

// StoreConfig lets f change the store's configuration.
func StoreConfig(f func(*sqlite.Config)) Option { return func(c *config) { f(&c.store) } }

// Core lets f change the runtime's configuration; New sets its Store and Provider.
func Core(f func(*core.Config)) Option { return func(c *config) { f(&c.core) } }

// Unstarted leaves the runtime's Start (the start-up reconcile and the periodic one) to the test.
func Unstarted() Option { return func(c *config) { c.unstart = true } }

// New wires a runtime over prov and a store in the test's temporary directory, and closes both when
// the test ends, before what the test registered earlier (a provider's release).
func New(t testing.TB, prov sandbox.Provider, opts ...Option) *Stack {
	t.Helper()
	s, err := Open(t.TempDir(), prov, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Open is New for a stack that outlives a test (a TestMain's): the store is a file in dir unless an
// option names one, and Close ends it.
func Open(dir string, prov sandbox.Provider, opts ...Option) (*Stack, error) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.store.Path == "" {
		c.store.Path = filepath.Join(dir, "sandboxd.db")
	}
	ctx := context.Background()
	st, err := sqlite.Open(ctx, c.store)
	if err != nil {
		return nil, err
	}
	c.core.Store, c.core.Provider = st, prov
	rt, err := core.New(c.core)
	if err != nil {
		st.Close()
		return nil, err
	}
	s := &Stack{Runtime: rt, Store: st}
	if !c.unstart {
		if err := rt.Start(ctx); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// Close closes the runtime, then the store.
func (s *Stack) Close() error {
	err := s.Runtime.Close()
	if serr := s.Store.Close(); err == nil {
		err = serr
	}
	return err
}
