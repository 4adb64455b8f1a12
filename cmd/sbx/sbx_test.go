package main

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/httpapi"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/testenv/stack"
	"github.com/sandboxd/sandbox/provider/host"
	"github.com/sandboxd/sandbox/store/sqlite"
)

func TestMain(m *testing.M) {
	testscript.Main(builtAgent{m}, map[string]func(){
		"sbx": func() { os.Exit(Main()) },
	})
}

// builtAgent runs the tests and removes the agent binary TestImageCommands builds.
type builtAgent struct{ m *testing.M }

func (b builtAgent) Run() int { return testenv.Run(b.m) }

// TestScripts runs the txtar scripts of testdata/script, each against its own daemon (the real stack with
// the host provider on a free loopback port), with SANDBOXD_URL pointing at it and sbx on PATH.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:   "testdata/script",
		Setup: setupDaemon,
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			// capture NAME sets $NAME to the last command's stdout, trimmed.
			"capture": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 1 {
					ts.Fatalf("usage: capture NAME")
				}
				ts.Setenv(args[0], strings.TrimSpace(ts.ReadFile("stdout")))
			},
		},
	})
}

// setupDaemon starts the daemon of one script and stops it when the script ends.
func setupDaemon(env *testscript.Env) error {
	dir := filepath.Join(env.WorkDir, ".sandboxd")
	logger := slog.New(slog.DiscardHandler)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	prov, err := host.New(host.Config{Dir: filepath.Join(dir, "sandboxes"), Logger: logger})
	if err != nil {
		return err
	}
	// Every script's daemon wants a token, so every command is shown to send $SANDBOXD_TOKEN.
	const token = "sbx-script-token"
	tokens, err := httpapi.NewTokens(token)
	if err != nil {
		return err
	}
	s, err := stack.Start(dir, prov,
		stack.StoreConfig(func(c *sqlite.Config) { c.Retention = 1000 }),
		stack.Core(func(c *core.Config) { c.Logger = logger }),
		stack.API(func(c *httpapi.Config) { c.Logger = logger; c.Tokens = tokens }))
	if err != nil {
		return err
	}
	env.Defer(s.Close)
	env.Setenv("SANDBOXD_URL", s.URL)
	env.Setenv("SANDBOXD_TOKEN", token)
	return nil
}

// TestImports checks that sbx depends on the client, the contract's wire types and the domain only (and
// internal/jsondoc, the client's JSON parser, internal/fastpath, the names of the switches to the
// plain paths, which depend on nothing, and internal/tarroot, a directory's tar streams, which depends
// on the domain only), never on the daemon's internals.
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const mod = "github.com/sandboxd/sandbox/"
	var ours []string
	for _, pkg := range strings.Fields(string(out)) {
		if !strings.HasPrefix(pkg, mod) {
			continue
		}
		ours = append(ours, pkg)
		switch rel := strings.TrimPrefix(pkg, mod); {
		case rel == "client", rel == "api", rel == "cmd/sbx", rel == "internal/jsondoc", rel == "internal/fastpath", rel == "internal/tarroot":
		default:
			t.Errorf("sbx depends on %s; it may use only the client package and the domain", pkg)
		}
	}
	if len(ours) < 2 {
		t.Errorf("go list -deps found %v; want at least the client package", ours)
	}
}
