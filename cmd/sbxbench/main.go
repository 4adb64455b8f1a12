// Command sbxbench measures a sandboxd daemon over its HTTP API on loopback, and, in the same run, the
// floors beside it: fork/exec of /bin/true, and `runc run -d` and `runc exec` of a bundle identical to the
// oci provider's. It reports p50, p90, p99 and throughput per case, the ratios to the floors, the daemon's
// memory per idle sandbox and how cost grows with the number of live sandboxes; a text table, or JSON
// with --json.
//
// Its invariant: every case is bounded (--count samples, --duration of wall time), every sandbox it
// makes is terminated before it exits, and it talks to nothing but loopback.
//
//	sbxbench --start --provider oci --sandboxd /tmp/sandboxd          # start a daemon on a temp dir
//	sbxbench --url http://127.0.0.1:8080 --pid 1234 --data-dir DIR     # drive a running one
//	sbxbench --start --sandboxd /tmp/new --baseline /tmp/old           # paired: new against old
//	sbxbench --start --sandboxd /tmp/sandboxd --rounds 7 --growth ''     # medians and ranges over rounds
//	sbxbench --start --sandboxd /tmp/sandboxd --burst 100 --growth ''    # creates/s, 20 callers, pool of 100
//	sbxbench --start --sandboxd /tmp/sandboxd --images --growth ''       # images, snapshots, forks, image pools, pulls
//
// `sbxbench agent ...` runs the sandbox agent, so the binary can serve as its own agent for the floors.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandbox/agent"
)

// Report is everything one run measured.
type Report struct {
	When     time.Time    `json:"when"`
	Host     string       `json:"host"`
	CPUs     int          `json:"cpus"`
	Provider string       `json:"provider"`
	Runtime  string       `json:"runtime,omitempty"` // the oci provider's OCI runtime, as the floors name it
	Cases    []Result     `json:"cases"`
	Floors   []Result     `json:"floors"`
	Ratios   []Ratio      `json:"ratios"`
	Rounds   []Spread     `json:"rounds,omitempty"`
	RoundP50 []Spread     `json:"roundP50,omitempty"`
	Growth   []GrowthStep `json:"growth,omitempty"`
	Compared []Paired     `json:"compared,omitempty"`
	Notes    []string     `json:"notes,omitempty"`
}

// Ratio compares the p50 of a case with the p50 of its floor.
type Ratio struct {
	Case  string  `json:"case"`
	Floor string  `json:"floor"`
	P50   float64 `json:"p50Ratio"`
}

// Spread is one ratio over the rounds of a run (--rounds): the p50 ratio of each round, and their
// median and range; or, without a floor, one case's p50 in milliseconds.
type Spread struct {
	Case   string    `json:"case"`
	Floor  string    `json:"floor"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Rounds []float64 `json:"rounds"`
}

type options struct {
	url, provider, growthProvider, sandboxd, dataDir string
	baseline, ociRuntime, pullImage                  string
	start, jsonOut, floors, images                   bool
	pid, warmPool, rounds                            int
	burst, burstClients, pullCount                   int
	bounds                                           Bounds
	idleWindow                                       time.Duration
	growth                                           []int
}

// daemonFlags are the flags of every daemon started, extra among them: the oci runtime's, when given
// (a daemon of another provider ignores it).
func (o options) daemonFlags(extra ...string) []string {
	if o.ociRuntime != "" {
		extra = append(extra, "--oci-runtime", o.ociRuntime)
	}
	return extra
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		if err := agent.Main(context.Background(), os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	opts, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "sbxbench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, opts)
	if rep != nil {
		if opts.jsonOut {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			enc.Encode(rep)
		} else {
			printText(os.Stdout, rep)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sbxbench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("sbxbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.url, "url", "", "base URL of a running daemon (loopback only)")
	fs.BoolVar(&o.start, "start", false, "start a daemon (--sandboxd) on a temporary data directory")
	fs.StringVar(&o.provider, "provider", "oci", "provider of the started daemon: oci or host")
	fs.StringVar(&o.growthProvider, "growth-provider", "", "with --start, run the growth steps on a second daemon with this provider (default: --provider)")
	fs.StringVar(&o.sandboxd, "sandboxd", "", "the sandboxd binary, to start a daemon and as the floors' agent (default: sandboxd from PATH, else this binary as agent)")
	fs.StringVar(&o.dataDir, "data-dir", "", "data directory of a running daemon, to measure provider state on disk")
	fs.IntVar(&o.pid, "pid", 0, "pid of a running daemon, to read its memory from /proc")
	fs.IntVar(&o.bounds.Count, "count", 200, "at most this many samples per case")
	fs.DurationVar(&o.bounds.Duration, "duration", 5*time.Second, "no new sample of a case after this long")
	fs.BoolVar(&o.jsonOut, "json", false, "print JSON instead of tables")
	fs.BoolVar(&o.floors, "floors", true, "measure fork/exec and runc floors (runc ones need root and runc)")
	fs.IntVar(&o.rounds, "rounds", 1, "measure the cases and their floors this many times on the same daemon, and report each ratio's and each case's p50 median and range over the rounds (the tables are the last round's)")
	fs.IntVar(&o.warmPool, "warm-pool", 0, "with --start and the oci provider, also time create-to-ready on a second daemon keeping this many containers warm (--oci-warm-pool)")
	fs.IntVar(&o.burst, "burst", 0, "with --start and the oci provider, also create this many sandboxes at once (--burst-clients callers) on a daemon keeping as many warm, and report creates per second")
	fs.IntVar(&o.burstClients, "burst-clients", 20, "concurrent callers of --burst")
	fs.BoolVar(&o.images, "images", false, "with --start and the oci provider, also time the image cases: create-to-ready from a cached image, a snapshot of 100 MiB of changes, forks of 10 and of one, (on one more daemon) a create from an image's warm pool, and (on one more) a pull from a registry on loopback against skopeo copy + umoci unpack, each beside its floor")
	fs.StringVar(&o.pullImage, "pull-image", "", "with --images, the OCI layout (one image) the pull case pushes to its registry and pulls (default: the Debian base the image tests cache, else a busybox image)")
	fs.IntVar(&o.pullCount, "pull-count", 5, "with --images, at most this many samples of the pull case and of its floor (and --count; none begun after --duration or a minute, whichever is longer)")
	fs.StringVar(&o.ociRuntime, "oci-runtime", "", "the OCI runtime binary of every oci daemon started and of the floors (e.g. a runsc for the gvisor class; default: runc from PATH)")
	fs.StringVar(&o.baseline, "baseline", "", "with --start, compare --sandboxd with this daemon binary instead: exec (true, 1 MiB of output), file writes and reads of 4 KiB and 1 MiB, get, event delivery and create-to-ready on both, samples taken in alternation")
	growth := fs.String("growth", "10,100,1000", "live sandbox counts of the growth steps; empty skips them")
	fs.DurationVar(&o.idleWindow, "idle-window", 0, "at each growth step, measure the daemon's CPU, its runtime processes included, while its sandboxes idle this long (cover a reconcile interval: 30s by default); 0 skips")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.start == (o.url != "") {
		return o, errors.New("give exactly one of --url and --start")
	}
	if o.bounds.Count < 1 || o.bounds.Duration <= 0 || o.rounds < 1 {
		return o, errors.New("--count, --duration and --rounds must be positive")
	}
	if o.url != "" {
		u, err := url.Parse(o.url)
		if err != nil || u.Scheme != "http" || !loopback(u.Hostname()) {
			return o, fmt.Errorf("--url %q: want http:// on a loopback address", o.url)
		}
		o.url = strings.TrimRight(o.url, "/")
	}
	for _, f := range strings.Split(*growth, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return o, fmt.Errorf("--growth: %q is not a positive count", f)
		}
		o.growth = append(o.growth, n)
	}
	if o.growthProvider == "" {
		o.growthProvider = o.provider
	}
	if o.sandboxd == "" {
		o.sandboxd, _ = exec.LookPath("sandboxd")
	}
	if o.pullCount < 1 {
		return o, errors.New("--pull-count must be positive")
	}
	if o.burst < 0 || o.burst > 1000 || o.burstClients < 1 {
		return o, errors.New("--burst must be between 0 and 1000 (the warm pool's bound), --burst-clients positive")
	}
	if o.baseline != "" && !o.start {
		return o, errors.New("--baseline needs --start")
	}
	if o.images && (!o.start || o.provider != "oci" || o.baseline != "") {
		return o, errors.New("--images needs --start and --provider oci, without --baseline")
	}
	if o.start && o.sandboxd == "" {
		return o, errors.New("--start needs the daemon binary: --sandboxd PATH (go build -o /tmp/sandboxd ./cmd/sandboxd)")
	}
	return o, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func run(ctx context.Context, o options) (*Report, error) {
	host, _ := os.Hostname()
	rep := &Report{When: time.Now().UTC(), Host: host, CPUs: runtime.NumCPU(), Provider: o.provider}
	tmp, err := os.MkdirTemp("", "sbxbench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	// The daemons' data directories are below it: searchable by their sandboxes' unprivileged host
	// uids, whose init reaches its root filesystem there (docs/security.md).
	if err := os.Chmod(tmp, 0o711); err != nil {
		return nil, err
	}
	prefix := "sbxbench-" + strconv.FormatInt(time.Now().UnixNano(), 36)

	if o.baseline != "" {
		return rep, comparison(ctx, rep, o, tmp, prefix)
	}

	d := daemonInfo{pid: o.pid, provider: o.provider, dataDir: o.dataDir}
	base := o.url
	var started *daemon
	if o.start {
		dm, err := startDaemon(ctx, o.sandboxd, o.provider, filepath.Join(tmp, "daemon"), o.daemonFlags()...)
		if err != nil {
			return nil, err
		}
		defer dm.stop()
		started = dm
		base, d.pid, d.dataDir = dm.url, dm.pid(), dm.dataDir
	} else {
		rep.Provider = "(running daemon)"
		if m, err := runtimeProvider(ctx, newClient(base)); err == nil {
			rep.Provider, d.provider = m, m
		}
	}
	c := newClient(base)

	var fl *floors
	if o.floors {
		agentPath, agentArgs := o.sandboxd, []string{"agent"}
		if agentPath == "" {
			if agentPath, err = os.Executable(); err != nil {
				return rep, err
			}
		}
		fl, err = newFloors(ctx, d.provider == "oci", filepath.Join(tmp, "floors"), agentPath, agentArgs, o.ociRuntime)
		if err != nil {
			return rep, err
		}
		defer fl.close(ctx)
		if fl.why != "" {
			rep.Notes = append(rep.Notes, "runc floors not measured: "+fl.why)
		} else if fl.prov != nil {
			rep.Runtime = fl.runtime
		}
	}

	var each, p50s [][]Ratio
	for round := range o.rounds {
		if fl != nil {
			fl.reset()
		}
		key := prefix
		if o.rounds > 1 {
			key = fmt.Sprintf("%s-r%d", prefix, round)
		}
		cases, err := apiCases(ctx, c, o.bounds, key, fl)
		rep.Cases = cases
		if err != nil {
			return rep, err
		}
		if fl != nil {
			rs, err := fl.results(ctx, o.bounds)
			rep.Floors = rs
			if err != nil {
				return rep, err
			}
			rep.Ratios = ratios(rep)
			each = append(each, rep.Ratios)
		}
		var p50 []Ratio
		for _, r := range append(slices.Clip(rep.Cases), rep.Floors...) {
			p50 = append(p50, Ratio{Case: r.Name, P50: r.P50})
		}
		p50s = append(p50s, p50)
	}
	if len(each) > 1 {
		rep.Rounds = spreads(each)
	}
	if len(p50s) > 1 {
		rep.RoundP50 = spreads(p50s)
	}

	if o.images && started != nil {
		ir, err := imageCases(ctx, o, tmp, prefix, started)
		rep.Cases = append(rep.Cases, ir.cases...)
		rep.Floors = append(rep.Floors, ir.floors...)
		rep.Ratios = append(rep.Ratios, ir.ratios...)
		rep.Notes = append(rep.Notes, ir.notes...)
		if err != nil {
			return rep, fmt.Errorf("image cases: %w", err)
		}
	}

	if o.warmPool > 0 && o.start && o.provider == "oci" {
		dm, err := startDaemon(ctx, o.sandboxd, "oci", filepath.Join(tmp, "warm"), o.daemonFlags("--oci-warm-pool", strconv.Itoa(o.warmPool))...)
		if err != nil {
			return rep, err
		}
		for i, resources := range []map[string]any{nil, {"memoryMiB": 256, "cpuMillis": 1000}} {
			r, err := warmCreate(ctx, newClient(dm.url), filepath.Join(dm.dataDir, "oci", "pool"), o.warmPool, resources, o.bounds, fmt.Sprintf("%s-%d", prefix, i))
			if err != nil {
				dm.stop()
				return rep, err
			}
			rep.Cases = append(rep.Cases, r)
		}
		dm.stop()
	}

	if o.burst > 0 && o.start && o.provider == "oci" {
		dm, err := startDaemon(ctx, o.sandboxd, "oci", filepath.Join(tmp, "burst"), o.daemonFlags("--oci-warm-pool", strconv.Itoa(o.burst))...)
		if err != nil {
			return rep, err
		}
		r, err := burstCreate(ctx, newClient(dm.url), filepath.Join(dm.dataDir, "oci", "pool"), o.burst, o.burstClients, prefix)
		dm.stop()
		if err != nil {
			return rep, err
		}
		rep.Cases = append(rep.Cases, r)
	}

	if len(o.growth) > 0 {
		gc, gd := c, d
		if o.start && o.growthProvider != o.provider {
			dm, err := startDaemon(ctx, o.sandboxd, o.growthProvider, filepath.Join(tmp, "growth"), o.daemonFlags()...)
			if err != nil {
				return rep, err
			}
			defer dm.stop()
			gc = newClient(dm.url)
			gd = daemonInfo{pid: dm.pid(), provider: o.growthProvider, dataDir: dm.dataDir}
		}
		steps, err := growth(ctx, gc, gd, o.growth, o.bounds, o.idleWindow, prefix)
		rep.Growth = steps
		if err != nil {
			return rep, err
		}
		if len(steps) > 0 && gd.pid == 0 {
			rep.Notes = append(rep.Notes, "daemon memory not measured: give --pid")
		}
	}
	return rep, nil
}

// comparison starts a daemon of --sandboxd and one of --baseline, on the same provider, and fills
// rep.Compared.
func comparison(ctx context.Context, rep *Report, o options, tmp, prefix string) error {
	rep.Provider = o.provider
	var urls [2]string
	for i, bin := range []string{o.sandboxd, o.baseline} {
		dm, err := startDaemon(ctx, bin, o.provider, filepath.Join(tmp, fmt.Sprint("compare-", i)), o.daemonFlags()...)
		if err != nil {
			return err
		}
		defer dm.stop()
		urls[i] = dm.url
	}
	rep.Notes = append(rep.Notes, "candidate "+o.sandboxd+", baseline "+o.baseline)
	var err error
	rep.Compared, err = compare(ctx, newClient(urls[0]), newClient(urls[1]), o.bounds, prefix)
	return err
}

func runtimeProvider(ctx context.Context, c *client) (string, error) {
	var rt struct {
		Provider struct {
			Name string `json:"name"`
		} `json:"provider"`
	}
	if err := c.do(ctx, "GET", "/v1/runtime", nil, 200, &rt); err != nil {
		return "", err
	}
	return rt.Provider.Name, nil
}

// spreads gathers the values of each round by case and floor, in the order of the first round.
func spreads(each [][]Ratio) []Spread {
	var out []Spread
	for _, r := range each[0] {
		sp := Spread{Case: r.Case, Floor: r.Floor}
		for _, round := range each {
			for _, q := range round {
				if q.Case == r.Case && q.Floor == r.Floor {
					sp.Rounds = append(sp.Rounds, q.P50)
				}
			}
		}
		sorted := slices.Sorted(slices.Values(sp.Rounds))
		n := len(sorted)
		sp.Min, sp.Max = sorted[0], sorted[n-1]
		sp.Median = sorted[n/2]
		if n%2 == 0 {
			sp.Median = (sorted[n/2-1] + sorted[n/2]) / 2
		}
		out = append(out, sp)
	}
	return out
}

// ratios compares cases with their floors, p50 to p50.
func ratios(rep *Report) []Ratio {
	find := func(rs []Result, name string) *Result {
		for i := range rs {
			if rs[i].Name == name {
				return &rs[i]
			}
		}
		return nil
	}
	rt := rep.Runtime
	if rt == "" {
		rt = "runc"
	}
	pairs := [][2]string{
		{"create-to-ready", runDFloor(rt)},
		{"create-to-ready", runDFloor(rt) + " + agent answer"},
		{"exec true", "floor: fork/exec /bin/true"},
		{"exec true, back to back", "floor: fork/exec, back to back"},
		{"exec true", execFloor(rt)},
		{"oci provider exec true (in-process)", "floor: fork/exec /bin/true"},
	}
	var out []Ratio
	for _, p := range pairs {
		c := find(rep.Cases, p[0])
		if c == nil {
			c = find(rep.Floors, p[0])
		}
		f := find(rep.Floors, p[1])
		if strings.HasPrefix(p[1], "floor: "+rt) && rep.Provider != "oci" {
			continue // a runtime's floor says nothing of another provider
		}
		if c == nil || f == nil || f.P50 == 0 {
			continue
		}
		out = append(out, Ratio{Case: p[0], Floor: p[1], P50: c.P50 / f.P50})
	}
	return out
}
