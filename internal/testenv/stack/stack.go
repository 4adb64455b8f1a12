// Package stack wires the daemon's layers for tests: a SQLite store, a provider, the runtime core and
// the HTTP API on a loopback test server, as `sandboxd serve` does. Everything it makes is closed when
// the test ends, the outer layers first, before what the test registered earlier (a provider's release).
// Only tests import it.
package stack

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/httpapi"
	"github.com/sandboxd/sandbox/store/sqlite"
	"github.com/sandboxd/sandbox/store/sqlite/sqlitetest"
)

// Stack is the wired daemon of one test.
type Stack struct {
	URL     string // the API's base URL, http://127.0.0.1:port
	API     *httpapi.Server
	Runtime *core.Runtime
	Store   *sqlite.Store
}

// Option changes what New wires.
type Option func(*config)

type config struct {
	store   sqlite.Config
	core    core.Config
	api     httpapi.Config
	unstart bool
}

// Store opens the store with cfg; by default it is a file in the test's temporary directory.
func Store(cfg sqlite.Config) Option { return func(c *config) { c.store = cfg } }

// Core lets f change the runtime's configuration; New sets its Store and Provider.
func Core(f func(*core.Config)) Option { return func(c *config) { f(&c.core) } }

// API lets f change the HTTP API's configuration; New sets its Runtime.
func API(f func(*httpapi.Config)) Option { return func(c *config) { f(&c.api) } }

// Unstarted leaves the runtime's Start (the start-up reconcile and the periodic one) to the test.
func Unstarted() Option { return func(c *config) { c.unstart = true } }

// New wires a stack over prov and closes it when the test ends.
func New(t testing.TB, prov sandbox.Provider, opts ...Option) *Stack {
	t.Helper()
	var c config
	for _, o := range opts {
		o(&c)
	}
	st := sqlitetest.Open(t, c.store)
	c.core.Store, c.core.Provider = st, prov
	rt, err := core.New(c.core)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	if !c.unstart {
		if err := rt.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	c.api.Runtime = rt
	api := httpapi.New(c.api)
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		api.Close() // ends the event streams, which srv.Close waits for
		srv.Close()
	})
	return &Stack{URL: srv.URL, API: api, Runtime: rt, Store: st}
}
