package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/netutil"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/httpapi"
	"github.com/sandboxd/sandbox/internal/fastpath"
	"github.com/sandboxd/sandbox/internal/metrics"
	"github.com/sandboxd/sandbox/internal/version"
	"github.com/sandboxd/sandbox/provider/host"
	"github.com/sandboxd/sandbox/provider/oci"
	"github.com/sandboxd/sandbox/store/sqlite"
)

var errHelp = errors.New("help requested")

// Main is the daemon: ParseFlags, Run, then Close. Tests start the whole daemon with it on 127.0.0.1:0.
type Main struct {
	Listen             string
	DataDir            string
	Provider           string
	EventRetention     int
	EventMaxAge        time.Duration
	ShutdownTimeout    time.Duration
	ReconcileInterval  time.Duration
	LogFormat          string
	OCIRuntime         string
	OCIWarmPool        int                 // started containers the oci provider keeps ready for new sandboxes
	OCISpares          int                 // sandbox directories (uid range, user namespace, disk) the oci provider lays out ahead
	OCIImagePools      []oci.ImagePool     // warm pools of images and templates (--oci-warm-pool-image, --oci-warm-pool-template)
	OCILimits          OCILimits           // what an oci sandbox gets when its spec says nothing, and the most it may ask
	OCINetwork         OCINetwork          // the oci sandboxes' networks and default egress policy
	K8s                K8sFlags            // the kubernetes provider's settings
	AuthTokenFile      string              // bearer tokens, one a line; required unless Listen is loopback
	ReadHeaderTimeout  time.Duration       // a client slower than this to send its headers is cut off
	ReadBodyTimeout    time.Duration       // ... or its body, with a second more for every 64 KiB of it
	IdleTimeout        time.Duration       // a kept-alive connection idle this long is closed
	MaxConnections     int                 // connections served at once; more wait to be accepted
	AllowedHosts       []string            // hosts requests may name besides the address they reached
	Plain              fastpath.Plain      // fast paths switched back to their plain path (docs/design)
	Lifetimes          core.LifetimeConfig // defaults and maxima of sandboxes' lifetimes (sandboxd.lifetime)
	InsecureRegistries []string            // registries images are pulled from over plain HTTP
	ImagePullTimeout   time.Duration       // how long the pull of a sandbox's image may take (core.Config.PrepareTimeout)
	Ports              PortFlags           // the ports proxy and preview URLs (preview.go)

	logOut io.Writer
	log    *slog.Logger

	store    *sqlite.Store
	runtime  *core.Runtime
	closer   io.Closer // the provider, when it holds resources of its own
	api      *httpapi.Server
	server   *http.Server
	listener net.Listener
	served   chan error
	stopAuth func() // stops the token reloads on SIGHUP
}

// OCILimits are the oci provider's resource defaults and maxima, in MiB; zero takes the provider's own.
type OCILimits struct {
	MemoryMiB, MaxMemoryMiB int64
	DiskMiB, MaxDiskMiB     int64
}

// DefaultOCIWarmPool is how many started containers the oci provider keeps ready unless told otherwise:
// enough that sandboxes created one after another, or a few at once, are ready in milliseconds instead
// of a runc run each (docs/performance.md), for the memory of four idle agents.
const DefaultOCIWarmPool = 4

// DefaultOCISpares is how many sandbox directories the oci provider keeps laid out ahead unless told
// otherwise: a sandbox that finds the pool empty (a burst) starts its container ≈6 ms sooner, for a
// loop device, a mount and a sleeping process each.
const DefaultOCISpares = 4

// DefaultMaxConnections is how many connections the daemon serves at once unless told otherwise: room
// for thousands of event streams, each a connection that stays open.
const DefaultMaxConnections = 4096

// NewMain returns a daemon with the defaults, logging to logOut.
func NewMain(logOut io.Writer) *Main {
	return &Main{
		Listen:            "127.0.0.1:4311",
		DataDir:           defaultDataDir(),
		Provider:          "auto",
		EventRetention:    100000,
		ShutdownTimeout:   10 * time.Second,
		ReconcileInterval: core.DefaultReconcileInterval,
		ImagePullTimeout:  core.DefaultPrepareTimeout,
		LogFormat:         "text",
		ReadHeaderTimeout: 10 * time.Second,
		ReadBodyTimeout:   httpapi.DefaultReadBodyTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxConnections:    DefaultMaxConnections,
		OCIWarmPool:       DefaultOCIWarmPool,
		OCISpares:         DefaultOCISpares,
		logOut:            logOut,
	}
}

// defaultDataDir is /var/lib/sandboxd for root, and a per-user state directory otherwise.
func defaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/sandboxd"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "sandboxd")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "sandboxd")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("sandboxd-%d", os.Geteuid()))
}

// ParseFlags reads the flags of `sandboxd serve`. Each flag has an environment equivalent,
// SANDBOXD_<FLAG> (upper case, dashes as underscores), which a flag on the command line overrides.
func (m *Main) ParseFlags(args []string) error {
	fs := flag.NewFlagSet("sandboxd serve", flag.ContinueOnError)
	fs.SetOutput(m.logOut)
	fs.StringVar(&m.Listen, "listen", m.Listen, "address to serve the HTTP API on")
	fs.StringVar(&m.DataDir, "data-dir", m.DataDir, "directory of the database and the providers' state")
	fs.StringVar(&m.Provider, "provider", m.Provider, "provider: "+strings.Join(providerNames(), ", "))
	fs.IntVar(&m.EventRetention, "event-retention", m.EventRetention, "how many events the log keeps")
	fs.DurationVar(&m.EventMaxAge, "event-max-age", m.EventMaxAge, "how long the log keeps an event (0: no age bound)")
	fs.DurationVar(&m.ShutdownTimeout, "shutdown-timeout", m.ShutdownTimeout, "how long in-flight requests may run on after SIGTERM")
	fs.DurationVar(&m.ReconcileInterval, "reconcile-interval", m.ReconcileInterval, "how often every live sandbox is reconciled")
	fs.DurationVar(&m.Lifetimes.DefaultTTL, "default-ttl", m.Lifetimes.DefaultTTL, "time to live of a sandbox whose spec asks for none (0: none)")
	fs.DurationVar(&m.Lifetimes.MaxTTL, "max-ttl", m.Lifetimes.MaxTTL, "the longest time to live a sandbox may ask for, and the one of a sandbox that asks for none (0: no bound)")
	fs.DurationVar(&m.Lifetimes.DefaultIdle, "default-idle", m.Lifetimes.DefaultIdle, "idle bound of a sandbox whose spec asks for none (0: none)")
	fs.DurationVar(&m.Lifetimes.MaxIdle, "max-idle", m.Lifetimes.MaxIdle, "the longest idle bound a sandbox may ask for, and the one of a sandbox that asks for none (0: no bound)")
	fs.StringVar(&m.Lifetimes.DefaultOnIdle, "default-on-idle", m.Lifetimes.DefaultOnIdle, "what an idle sandbox undergoes when its spec does not say: pause or terminate (default: pause where the provider can)")
	fs.StringVar(&m.LogFormat, "log-format", m.LogFormat, "log format: text or json")
	fs.StringVar(&m.AuthTokenFile, "auth-token-file", m.AuthTokenFile, "file of accepted bearer tokens, one a line, reloaded on SIGHUP; required unless --listen is loopback")
	fs.DurationVar(&m.ReadHeaderTimeout, "read-header-timeout", m.ReadHeaderTimeout, "how long a client may take to send its request headers")
	fs.DurationVar(&m.ReadBodyTimeout, "read-body-timeout", m.ReadBodyTimeout, "how long a client may take to send a request body, plus a second for every 64 KiB of it")
	fs.DurationVar(&m.IdleTimeout, "idle-timeout", m.IdleTimeout, "how long a kept-alive connection may wait for its next request")
	fs.IntVar(&m.MaxConnections, "max-connections", m.MaxConnections, "how many connections are served at once; more wait until one closes")
	hosts := &hostsFlag{hosts: &m.AllowedHosts}
	fs.Var(hosts, "allowed-host", "a `host` (name, or name:port) requests may name in Host besides the address they reached; repeatable, comma separated")
	fs.Var(&registriesFlag{&m.InsecureRegistries}, "insecure-registry", "a registry (`host` or host:port) images are pulled from over plain HTTP; repeatable, comma separated")
	fs.DurationVar(&m.ImagePullTimeout, "image-pull-timeout", m.ImagePullTimeout, "how long the pull of a sandbox's image may take; the sandbox is starting meanwhile, and fails (image_pull_failed) past it")
	fs.StringVar(&m.OCIRuntime, "oci-runtime", m.OCIRuntime, "the OCI runtime binary of the oci provider (default: runc from PATH)")
	fs.IntVar(&m.OCIWarmPool, "oci-warm-pool", m.OCIWarmPool, "oci provider: how many started containers to keep ready, so that a sandbox with the default disk size is ready without starting one (0: none)")
	fs.Var(&imagePoolsFlag{pools: &m.OCIImagePools}, "oci-warm-pool-image", "oci provider: `REF=N` keeps N started containers of the image REF ready (pulled when the store lacks it), for sandboxes whose spec.image names the same digest; repeatable, comma separated")
	fs.Var(&imagePoolsFlag{pools: &m.OCIImagePools, template: true}, "oci-warm-pool-template", "oci provider: `NAME=N` keeps N started containers of the template NAME's newest version ready, for sandboxes whose spec.template names the same digest; repeatable, comma separated")
	fs.IntVar(&m.OCISpares, "oci-spares", m.OCISpares, "oci provider: how many sandbox directories (uid range, user namespace, default disk) to keep laid out ahead, so that a sandbox that starts a container of its own need not make them (0: none)")
	fs.Int64Var(&m.OCILimits.MemoryMiB, "oci-memory-mib", 0, "oci provider: memory limit of a sandbox whose spec sets none (default 1024)")
	fs.Int64Var(&m.OCILimits.MaxMemoryMiB, "oci-max-memory-mib", 0, "oci provider: the most memory a spec may ask for (default: the machine's)")
	fs.Int64Var(&m.OCILimits.DiskMiB, "oci-disk-mib", 0, "oci provider: size of the /workspace disk of a sandbox whose spec sets none (default 1024)")
	fs.Int64Var(&m.OCILimits.MaxDiskMiB, "oci-max-disk-mib", 0, "oci provider: the largest disk a spec may ask for (default 65536)")
	fs.Func("plain", "fast paths to run on their plain path instead, a list of "+strings.Join(fastpath.Names, ", ")+" or all: json (encoding/json parses request bodies), schema (the JSON Schema library validates them; needs a build with -tags plainschema), tail (every event read comes from the database), journal (every event appended in a SQLite transaction of its own) (docs/design)", func(v string) error {
		p, err := fastpath.Parse(v)
		if err == nil && p[fastpath.Schema] && plainSchemas == nil {
			err = errors.New("this sandboxd is built without the library path of validation: build it with -tags plainschema")
		}
		if err == nil {
			m.Plain = p
		}
		return err
	})
	m.K8s.register(fs)
	m.OCINetwork.register(fs)
	m.Ports.register(fs)
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "SANDBOXD_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok {
			if err := f.Value.Set(v); err != nil && envErr == nil {
				envErr = fmt.Errorf("%s=%q: %v", name, v, err)
			}
		}
	})
	if envErr != nil {
		return envErr
	}
	hosts.fromEnv = true // the command line replaces the environment's list
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if m.EventRetention < 1 {
		return fmt.Errorf("--event-retention must be at least 1, got %d", m.EventRetention)
	}
	if m.ReadHeaderTimeout <= 0 {
		return fmt.Errorf("--read-header-timeout must be positive, got %v", m.ReadHeaderTimeout)
	}
	if m.ReadBodyTimeout <= 0 {
		return fmt.Errorf("--read-body-timeout must be positive, got %v", m.ReadBodyTimeout)
	}
	if m.ImagePullTimeout <= 0 {
		return fmt.Errorf("--image-pull-timeout must be positive, got %v", m.ImagePullTimeout)
	}
	if m.IdleTimeout <= 0 {
		return fmt.Errorf("--idle-timeout must be positive, got %v", m.IdleTimeout)
	}
	if m.MaxConnections < 1 {
		return fmt.Errorf("--max-connections must be at least 1, got %d", m.MaxConnections)
	}
	if err := m.Ports.check(); err != nil {
		return err
	}
	lt := m.Lifetimes
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--default-ttl", lt.DefaultTTL}, {"--max-ttl", lt.MaxTTL}, {"--default-idle", lt.DefaultIdle}, {"--max-idle", lt.MaxIdle}} {
		if d.v < 0 || d.v%time.Second != 0 {
			return fmt.Errorf("%s must be whole seconds, not negative, got %v", d.flag, d.v)
		}
	}
	if lt.DefaultOnIdle != "" && lt.DefaultOnIdle != "pause" && lt.DefaultOnIdle != "terminate" {
		return fmt.Errorf("--default-on-idle must be pause or terminate, got %q", lt.DefaultOnIdle)
	}
	if m.OCIWarmPool < 0 || m.OCIWarmPool > 1000 {
		return fmt.Errorf("--oci-warm-pool must be between 0 and 1000, got %d", m.OCIWarmPool)
	}
	if m.OCISpares < 0 || m.OCISpares > 1000 {
		return fmt.Errorf("--oci-spares must be between 0 and 1000, got %d", m.OCISpares)
	}
	if err := m.OCINetwork.check(m.OCIWarmPool); err != nil {
		return err
	}
	// Read once by the agent client when the process started (agentclient.DefaultWire).
	if _, err := agentclient.ParseWire(os.Getenv(agentclient.WireEnv)); err != nil {
		return err
	}
	return m.checkAuthNeeded()
}

// Run opens the store, starts the provider and the runtime, reconciles, and starts serving. It returns
// once the listener is open; Addr says where.
func (m *Main) Run(ctx context.Context) error {
	var h slog.Handler = slog.NewTextHandler(m.logOut, nil)
	if m.LogFormat == "json" {
		h = slog.NewJSONHandler(m.logOut, nil)
	}
	m.log = slog.New(h)
	if err := m.checkAuthNeeded(); err != nil {
		return err
	}
	tokens, stopAuth, err := m.openTokens()
	if err != nil {
		return err
	}
	m.stopAuth = stopAuth
	if err := m.Ports.loadTLS(m.log); err != nil {
		return err
	}
	if err := makeDataDir(m.DataDir); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	met := metrics.New()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(m.DataDir, "sandboxd.db"), Retention: m.EventRetention, MaxAge: m.EventMaxAge,
		NoTail: m.Plain[fastpath.Tail], NoJournal: m.Plain[fastpath.Journal], ObserveCommit: met.ObserveCommit})
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	m.store = st
	prov, err := m.openProvider()
	if err != nil {
		return err
	}
	if man, err := prov.Manifest(ctx); err == nil {
		met.SetRuntimeClass(man.RuntimeClass)
	}
	rt, err := core.New(core.Config{
		Store:             st,
		Provider:          prov,
		Logger:            m.log,
		ReconcileInterval: m.ReconcileInterval,
		PrepareTimeout:    m.ImagePullTimeout,
		Lifetimes:         m.Lifetimes,
		ObserveProvider:   met.ObserveProvider,
	})
	if err != nil {
		return err
	}
	m.runtime = rt
	pool, _ := prov.(sandbox.PoolReporter)
	met.Watch(rt, pool)
	if err := rt.Start(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", m.Listen)
	if err != nil {
		return err
	}
	m.listener = ln
	cfg := httpapi.Config{
		Runtime:         rt,
		Logger:          m.log,
		Tokens:          tokens,
		AllowedHosts:    m.allowedHosts(),
		ReadBodyTimeout: m.ReadBodyTimeout,
		PlainJSON:       m.Plain[fastpath.JSON],
		ObserveRequest:  met.ObserveRequest,
		Audit:           m.log,
		Metrics:         met.Handler(),

		PortResponseTimeout: m.Ports.ResponseTimeout,
	}
	if cfg.Preview, err = m.Ports.open(m.DataDir); err != nil {
		return err
	}
	if m.Plain[fastpath.Schema] {
		cfg.Schemas = plainSchemas
	}
	m.api = httpapi.New(cfg)
	// No ReadTimeout or WriteTimeout: they would cut event streams and long commands. The API bounds
	// each request's body itself.
	m.server = &http.Server{
		Handler:           m.api,
		ReadHeaderTimeout: m.ReadHeaderTimeout, // a slow-header client is cut off
		IdleTimeout:       m.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(h, slog.LevelWarn),
	}
	m.served = make(chan error, 1)
	limited := netutil.LimitListener(ln, m.MaxConnections)
	go func() { m.served <- m.server.Serve(limited) }()
	m.Ports.serve(m.api, m.ReadHeaderTimeout, m.IdleTimeout, h)
	m.log.Info("serving", "addr", ln.Addr().String(), "data_dir", m.DataDir, "version", version.Version, "auth", tokens != nil)
	return nil
}

// allowedHosts are the hosts the API answers to besides the address a client reached: --allowed-host,
// and the --listen host when it names one (a name, or an address that is not a wildcard) with the port
// listened on.
func (m *Main) allowedHosts() []string {
	hosts := slices.Clone(m.AllowedHosts)
	host, _, err := net.SplitHostPort(m.Listen)
	if ip := net.ParseIP(host); err == nil && host != "" && (ip == nil || !ip.IsUnspecified()) {
		_, port, _ := net.SplitHostPort(m.listener.Addr().String())
		hosts = append(hosts, net.JoinHostPort(host, port))
	}
	return hosts
}

// hostsFlag is a repeatable flag of comma-separated hosts. The first value from the command line
// replaces what the environment gave.
type hostsFlag struct {
	hosts   *[]string
	fromEnv bool
}

func (f *hostsFlag) String() string {
	if f.hosts == nil {
		return ""
	}
	return strings.Join(*f.hosts, ",")
}

func (f *hostsFlag) Set(v string) error {
	if f.fromEnv {
		*f.hosts, f.fromEnv = nil, false
	}
	for _, h := range strings.Split(v, ",") {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		if err := httpapi.CheckAllowedHost(h); err != nil {
			return err
		}
		*f.hosts = append(*f.hosts, h)
	}
	return nil
}

// Addr is the address the API listens on, once Run has returned.
func (m *Main) Addr() string { return m.listener.Addr().String() }

// Close stops accepting, lets in-flight requests finish within ShutdownTimeout, stops the runtime's
// background work and closes the store.
func (m *Main) Close() error {
	var errs []error
	if m.server != nil {
		m.api.Close() // ends event streams, which would otherwise hold Shutdown for its whole bound
		ctx, cancel := context.WithTimeout(context.Background(), m.ShutdownTimeout)
		if err := m.server.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("shutdown: %w", err))
			m.server.Close()
		}
		cancel()
		if err := <-m.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
		m.server = nil
	}
	{
		ctx, cancel := context.WithTimeout(context.Background(), m.ShutdownTimeout)
		if err := m.Ports.close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("preview shutdown: %w", err))
		}
		cancel()
	}
	if m.stopAuth != nil {
		m.stopAuth()
		m.stopAuth = nil
	}
	if m.runtime != nil {
		errs = append(errs, m.runtime.Close())
		m.runtime = nil
	}
	if m.closer != nil {
		errs = append(errs, m.closer.Close())
		m.closer = nil
	}
	if m.store != nil {
		errs = append(errs, m.store.Close())
		m.store = nil
	}
	if m.log != nil {
		m.log.Info("stopped")
	}
	return errors.Join(errs...)
}

// makeDataDir makes the data directory, or takes the one there, searchable but not readable by others:
// the oci provider's sandboxes run as unprivileged host uids, and their runtime must reach their root
// filesystems below it. Every file the daemon keeps there is its owner's alone (mode 0600).
func makeDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o011 != 0o011 {
		return os.Chmod(dir, st.Mode().Perm()|0o011)
	}
	return nil
}

// providers are the providers the daemon can run, by name.
var providers = map[string]func(m *Main) (sandbox.Provider, error){
	"host": func(m *Main) (sandbox.Provider, error) {
		return host.New(host.Config{Dir: filepath.Join(m.DataDir, "host"), Logger: m.log})
	},
	"oci": func(m *Main) (sandbox.Provider, error) {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding the agent binary: %w", err)
		}
		return oci.New(oci.Config{
			StateDir:   filepath.Join(m.DataDir, "oci"),
			Runtime:    m.OCIRuntime,
			AgentPath:  self,
			Logger:     m.log,
			WarmPool:   m.OCIWarmPool,
			Spares:     m.OCISpares,
			ImagePools: m.OCIImagePools,

			DefaultMemoryMiB: m.OCILimits.MemoryMiB,
			MaxMemoryMiB:     m.OCILimits.MaxMemoryMiB,
			DefaultDiskMiB:   m.OCILimits.DiskMiB,
			MaxDiskMiB:       m.OCILimits.MaxDiskMiB,
			Network:          m.OCINetwork.config(m.OCIWarmPool),

			InsecureRegistries: m.InsecureRegistries,
		})
	},
	"kubernetes": func(m *Main) (sandbox.Provider, error) { return m.K8s.open(m.log) },
}

// providerNames are the values --provider takes: auto, then the providers by name.
func providerNames() []string {
	return append([]string{"auto"}, slices.Sorted(maps.Keys(providers))...)
}

// openProvider builds the chosen provider; "auto" picks the best one available and says why.
func (m *Main) openProvider() (sandbox.Provider, error) {
	name := m.Provider
	if name == "auto" {
		var why string
		name, why = autoProvider()
		m.log.Info("provider chosen", "provider", name, "why", why)
	}
	mk, ok := providers[name]
	if !ok {
		return nil, fmt.Errorf("unknown provider %q (have %s)", name, strings.Join(providerNames(), ", "))
	}
	p, err := mk(m)
	if err != nil {
		return nil, fmt.Errorf("provider %s: %w", name, err)
	}
	if c, ok := p.(io.Closer); ok {
		m.closer = c
	}
	return p, nil
}

// autoProvider picks oci when it can run (root on Linux with runc present), else host.
func autoProvider() (name, why string) {
	ok, why := oci.Available()
	if ok {
		return "oci", "root on Linux with runc present"
	}
	return "host", "oci unavailable (" + why + "); host has no isolation"
}
