// Package host is a sandbox provider that runs commands as plain host processes, each sandbox
// generation being one directory: <Dir>/<ref.Name()>/.
//
// It gives NO isolation: commands run as the daemon's user, see the whole host filesystem and network,
// and can do whatever that user can. Only the file API is confined to the sandbox directory (through
// fsroot), and commands start in it. Use it for development and tests, never for untrusted code.
//
// Main invariant: a generation is live exactly while its directory exists. Allocate creates it (or
// finds it), Release kills the generation's commands and removes it. Pause SIGSTOPs the generation's
// running commands and refuses new ones until Resume; the paused state is kept as a marker file beside
// the directory (<Dir>/<name>.paused), not inside it where the sandbox could remove or forge it, so
// Observe stays truthful across a restart of the daemon.
package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent"
	"github.com/sandboxd/sandbox/fsroot"
	"github.com/sandboxd/sandbox/internal/version"
	"github.com/sandboxd/sandbox/proc"
)

// Name and runtime class of the provider's manifest.
const (
	Name         = "host"
	RuntimeClass = "host-process"
)

const pausedSuffix = ".paused"

// DefaultPath is the PATH of commands when Config.Env does not set one.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Config configures a Provider.
type Config struct {
	Dir    string       // where sandbox directories live; created if missing
	Logger *slog.Logger // nil: slog.Default()
	// Env is the base environment of every command, "KEY=value". The daemon's own environment is never
	// passed on. HOME is always the sandbox directory; PATH defaults to DefaultPath.
	Env []string
}

// Provider is the host provider.
type Provider struct {
	dir string
	env []string
	log *slog.Logger

	mu      sync.Mutex
	runners map[string]*proc.Runner     // by ref.Name(), for generations that ran or paused something
	tables  map[string]*agent.Processes // by ref.Name(), for generations that started a background process (process.go)

	files agent.Files // streamed files and watches of every generation (files.go)
}

var (
	_ sandbox.Provider     = (*Provider)(nil)
	_ sandbox.Executor     = (*Provider)(nil)
	_ sandbox.FileSystem   = (*Provider)(nil)
	_ sandbox.PauseResumer = (*Provider)(nil)
)

// New returns a provider keeping its sandboxes under cfg.Dir.
func New(cfg Config) (*Provider, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("host provider: no directory: %w", sandbox.ErrInvalidRequest)
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("host provider: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("host provider: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	env := []string{"PATH=" + DefaultPath}
	for _, kv := range cfg.Env {
		if !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	return &Provider{dir: dir, env: env, log: log.With("provider", Name), runners: make(map[string]*proc.Runner), tables: make(map[string]*agent.Processes)}, nil
}

// Manifest describes the provider.
func (p *Provider) Manifest(context.Context) (sandbox.Manifest, error) {
	return sandbox.Manifest{
		Name:         Name,
		Version:      version.Version,
		RuntimeClass: RuntimeClass,
		Capabilities: sandbox.Capabilities{CommandExecution: true, FileAccess: true, PauseResume: true, InteractiveTerminal: true},
	}, nil
}

// path returns the directory of ref, or ErrInvalidRequest when ref cannot name one.
func (p *Provider) path(ref sandbox.Ref) (string, error) {
	name := ref.Name()
	if ref.ID == "" || ref.Generation < 1 || strings.ContainsAny(string(ref.ID), "/\x00") ||
		strings.HasPrefix(name, ".") || strings.HasSuffix(name, pausedSuffix) {
		return "", fmt.Errorf("host provider: bad sandbox reference %q: %w", name, sandbox.ErrInvalidRequest)
	}
	return filepath.Join(p.dir, name), nil
}

// Allocate creates the directory of ref, or finds it. It returns ErrUnsupportedCapability for an image
// or template, which the provider cannot honour.
func (p *Provider) Allocate(ctx context.Context, ref sandbox.Ref, spec sandbox.Spec) (sandbox.Observation, error) {
	dir, err := p.path(ref)
	if err != nil {
		return sandbox.Observation{}, err
	}
	if spec.Image != "" || spec.Template != "" {
		return sandbox.Observation{}, fmt.Errorf("host provider: images and templates: %w", sandbox.ErrUnsupportedCapability)
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return sandbox.Observation{}, fmt.Errorf("host provider: allocate %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
	}
	p.log.Debug("allocated", "sandbox", ref.ID, "generation", ref.Generation)
	return p.Observe(ctx, ref)
}

// Observe reports ref: ready or paused while its directory exists, absent once it does not.
func (p *Provider) Observe(_ context.Context, ref sandbox.Ref) (sandbox.Observation, error) {
	dir, err := p.path(ref)
	if err != nil {
		return sandbox.Observation{}, err
	}
	obs := sandbox.Observation{Ref: ref}
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		obs.State = sandbox.ObservedAbsent
		return obs, nil
	case err != nil:
		return sandbox.Observation{}, fmt.Errorf("host provider: observe %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
	case !fi.IsDir():
		obs.State, obs.Reason, obs.Message = sandbox.ObservedFailed, "not_a_directory", dir+" is not a directory"
		return obs, nil
	}
	obs.State = sandbox.ObservedReady
	if _, err := os.Lstat(dir + pausedSuffix); err == nil {
		obs.State = sandbox.ObservedPaused
	}
	return obs, nil
}

// Release kills the commands of ref and removes its directory. An absent ref is released already.
func (p *Provider) Release(ctx context.Context, ref sandbox.Ref) error {
	dir, err := p.path(ref)
	if err != nil {
		return err
	}
	// A closed runner stays in place until the directory is gone, so that an Exec racing with the
	// release is refused instead of starting in a directory being removed.
	p.mu.Lock()
	r := p.runners[ref.Name()]
	if r == nil {
		r = &proc.Runner{}
		p.runners[ref.Name()] = r
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		if p.runners[ref.Name()] == r {
			delete(p.runners, ref.Name())
		}
		p.mu.Unlock()
	}()
	if err := r.Close(ctx); err != nil {
		return fmt.Errorf("host provider: release %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
	}
	p.dropTable(ref)
	// The marker goes first: a release cut short in between leaves the directory, which Resources lists
	// and the next release removes.
	if err := os.Remove(dir + pausedSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("host provider: release %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("host provider: release %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
	}
	p.log.Debug("released", "sandbox", ref.ID, "generation", ref.Generation)
	return nil
}

// Resources lists the generations that have a directory or a pause marker (a marker left by a pause that
// raced with a release, or by a crash). Entries that do not parse as a generation's name are not the
// provider's and are left alone.
func (p *Provider) Resources(context.Context) ([]sandbox.Ref, error) {
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		return nil, fmt.Errorf("host provider: list %s: %v: %w", p.dir, err, sandbox.ErrProviderUnavailable)
	}
	var refs []sandbox.Ref
	seen := map[sandbox.Ref]bool{}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() {
			var marker bool
			if name, marker = strings.CutSuffix(name, pausedSuffix); !marker {
				continue
			}
		}
		i := strings.LastIndex(name, "-g")
		if i <= 0 {
			continue
		}
		gen, err := strconv.ParseInt(name[i+2:], 10, 64)
		ref := sandbox.Ref{ID: sandbox.ID(name[:i]), Generation: sandbox.Generation(gen)}
		if err != nil || gen < 1 || ref.Name() != name || seen[ref] {
			continue
		}
		seen[ref] = true
		refs = append(refs, ref)
	}
	return refs, nil
}

// live returns the directory of ref, or ErrNotFound when it is not allocated.
func (p *Provider) live(ref sandbox.Ref) (string, error) {
	dir, err := p.path(ref)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return "", fmt.Errorf("host provider: sandbox %s is not allocated: %w", ref, sandbox.ErrNotFound)
	}
	return dir, nil
}

// runner returns the runner of ref, making it on first use. A new runner starts stopped when the
// generation is marked paused (after a restart, say).
func (p *Provider) runner(ref sandbox.Ref, dir string) *proc.Runner {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.runners[ref.Name()]
	if r == nil {
		r = &proc.Runner{Env: append(append([]string(nil), p.env...), "HOME="+dir)}
		if _, err := os.Lstat(dir + pausedSuffix); err == nil {
			r.Stop()
		}
		p.runners[ref.Name()] = r
	}
	return r
}

// Exec runs cmd with the sandbox directory as working directory (cmd.Cwd resolves inside it). It
// returns ErrNotFound when ref is not allocated or cmd.Cwd is missing, ErrInvalidRequest for a bad
// command or a Cwd that is not a directory, and ErrInvalidState while the sandbox is paused.
func (p *Provider) Exec(ctx context.Context, ref sandbox.Ref, cmd sandbox.Command) (sandbox.CommandResult, error) {
	dir, err := p.live(ref)
	if err != nil {
		return sandbox.CommandResult{}, err
	}
	cwd, err := p.resolveCwd(dir, cmd.Cwd)
	if err != nil {
		return sandbox.CommandResult{}, fmt.Errorf("host provider: exec in %s: %w", ref, err)
	}
	res, err := p.runner(ref, dir).Run(ctx, cwd, cmd)
	if err != nil {
		return res, fmt.Errorf("host provider: exec in %s: %w", ref, err)
	}
	return res, nil
}

func (p *Provider) resolveCwd(dir, cwd string) (string, error) {
	if cwd == "" {
		return dir, nil
	}
	root, err := fsroot.Open(dir, "/")
	if err != nil {
		return "", err
	}
	defer root.Close()
	return root.ResolveDir(cwd)
}

// Pause stops the running commands of ref and refuses new ones until Resume. Pausing a paused
// sandbox changes nothing. It returns ErrNotFound when ref is not allocated.
func (p *Provider) Pause(_ context.Context, ref sandbox.Ref) error {
	dir, err := p.live(ref)
	if err != nil {
		return err
	}
	if err := os.WriteFile(dir+pausedSuffix, nil, 0o644); err != nil {
		return fmt.Errorf("host provider: pause %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
	}
	if _, err := p.live(ref); err != nil {
		// A release ran between the check and the marker: take the marker back.
		_ = os.Remove(dir + pausedSuffix)
		return err
	}
	p.runner(ref, dir).Stop()
	return nil
}

// Resume continues the commands of ref stopped by Pause. Resuming a running sandbox changes nothing.
// It returns ErrNotFound when ref is not allocated.
func (p *Provider) Resume(_ context.Context, ref sandbox.Ref) error {
	dir, err := p.live(ref)
	if err != nil {
		return err
	}
	p.runner(ref, dir).Continue()
	if err := os.Remove(dir + pausedSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("host provider: resume %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
	}
	return nil
}

// withRoot opens the sandbox directory of ref as a confined root with workdir "/".
func (p *Provider) withRoot(ref sandbox.Ref, f func(*fsroot.Root) error) error {
	dir, err := p.live(ref)
	if err != nil {
		return err
	}
	root, err := fsroot.Open(dir, "/")
	if err != nil {
		return fmt.Errorf("host provider: open %s: %w", ref, err)
	}
	defer root.Close()
	root.Durable = true // a host sandbox is only a directory: it is still there after a crash of the host
	return f(root)
}

// ReadFile reads path inside the sandbox. Errors as fsroot.Root.ReadFile, and ErrNotFound when ref is
// not allocated.
func (p *Provider) ReadFile(_ context.Context, ref sandbox.Ref, path string) ([]byte, error) {
	var data []byte
	err := p.withRoot(ref, func(r *fsroot.Root) (err error) {
		data, err = r.ReadFile(path, sandbox.MaxFileBytes)
		return err
	})
	return data, err
}

// WriteFile replaces path inside the sandbox atomically. Errors as fsroot.Root.WriteFile, and
// ErrNotFound when ref is not allocated.
func (p *Provider) WriteFile(_ context.Context, ref sandbox.Ref, path string, data []byte) error {
	if len(data) > sandbox.MaxFileBytes {
		return fmt.Errorf("host provider: write %q: %d bytes: %w", path, len(data), sandbox.ErrRequestTooLarge)
	}
	return p.withRoot(ref, func(r *fsroot.Root) error { return r.WriteFile(path, data) })
}

// ListFiles lists the directory path inside the sandbox. Errors as fsroot.Root.List, and ErrNotFound
// when ref is not allocated.
func (p *Provider) ListFiles(_ context.Context, ref sandbox.Ref, path string) ([]sandbox.FileEntry, error) {
	var entries []sandbox.FileEntry
	err := p.withRoot(ref, func(r *fsroot.Root) (err error) {
		entries, err = r.List(path)
		return err
	})
	return entries, err
}
