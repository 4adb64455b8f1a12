package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	sbxclient "github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/httpapi"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/testenv/stack"
	"github.com/sandboxd/sandbox/provider/host"
	"github.com/sandboxd/sandbox/provider/oci"
	"github.com/sandboxd/sandbox/store/sqlite"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// inProcess serves the real API (SQLite store, core, host provider) on 127.0.0.1:0 and returns a client.
func inProcess(t testing.TB) *client {
	t.Helper()
	dir := t.TempDir()
	prov, err := host.New(host.Config{Dir: filepath.Join(dir, "host"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return serveInProcess(t, dir, prov)
}

// inProcessOCI is inProcess on the oci provider, with the agent built from ./cmd/sandboxd.
func inProcessOCI(t testing.TB) *client {
	t.Helper()
	if ok, why := oci.Available(); !ok {
		t.Skip(why)
	}
	dir := testenv.StateDir(t)
	prov, err := oci.New(oci.Config{StateDir: filepath.Join(dir, "oci"), AgentPath: testenv.BuildAgent(t),
		AgentArgs: []string{"agent"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the API stops (cleanups run last first), before dir goes
		ctx := context.Background()
		refs, err := prov.Resources(ctx)
		if err != nil {
			t.Error(err)
		}
		for _, ref := range refs {
			if err := prov.Release(ctx, ref); err != nil {
				t.Error(err)
			}
		}
	})
	return serveInProcess(t, dir, prov)
}

func serveInProcess(t testing.TB, dir string, prov sandbox.Provider) *client {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	s := stack.New(t, prov, stack.Unstarted(),
		stack.Store(sqlite.Config{Path: filepath.Join(dir, "sandboxd.db")}),
		stack.Core(func(c *core.Config) { c.Logger, c.ReconcileInterval = log, -1 }),
		stack.API(func(c *httpapi.Config) { c.Logger = log }))
	return newClient(s.URL)
}

// TestAPICasesAndGrowth runs every API case and two growth steps, a few samples each, against a real
// daemon stack, and checks that each case took its samples and that the report prints.
func TestAPICasesAndGrowth(t *testing.T) {
	c := inProcess(t)
	ctx := context.Background()
	b := Bounds{Count: 3, Duration: time.Minute}
	fl, err := newFloors(ctx, false, "", "", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer fl.close(ctx)
	cases, err := apiCases(ctx, c, b, "test", fl)
	if err != nil {
		t.Fatal(err)
	}
	// The fork/exec floor is sampled once beside each exec of true, and the back-to-back one in a block
	// after each block of back-to-back execs (here one block of three).
	floorRes, err := fl.results(ctx, b)
	if err != nil || len(floorRes) != 3 || floorRes[0].N != cases[1].N || floorRes[0].P50 <= 0 ||
		floorRes[1].N != cases[2].N || floorRes[1].P50 <= 0 ||
		floorRes[2].Name != "floor: open-loop schedule" || floorRes[2].N != getBounds(b).Count {
		t.Fatalf("floors %+v %v (exec true took %d samples, back to back %d)", floorRes, err, cases[1].N, cases[2].N)
	}
	want := []string{"create-to-ready", "exec true", "exec true, back to back", "exec 1 MiB output", "file write 4 KiB", "file read 4 KiB",
		"file write 1 MiB", "file read 1 MiB", "get, 64 clients", "get, 64 clients at 4000/s", "event delivery, 1 subscriber(s)", "event delivery, 100 subscriber(s)"}
	if len(cases) != len(want) {
		t.Fatalf("got %d cases, want %d", len(cases), len(want))
	}
	for i, r := range cases {
		if r.Name != want[i] || r.N < 3 || r.P50 <= 0 || r.P50 > r.P99 {
			t.Errorf("case %d: %+v", i, r)
		}
	}
	if n := cases[11].N; n != 300 { // 3 samples seen by each of 100 subscribers
		t.Errorf("event delivery with 100 subscribers took %d samples, want 300", n)
	}
	steps, err := growth(ctx, c, daemonInfo{provider: "host"}, []int{2, 5}, b, 0, "test")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2 || steps[0].Live != 2 || steps[1].Live != 5 || steps[1].Create.N != 3 || steps[1].List.N != 3 {
		t.Fatalf("growth steps %+v", steps)
	}
	var sb strings.Builder
	printText(&sb, &Report{Provider: "host", Cases: cases, Floors: floorRes, Growth: steps})
	if !strings.Contains(sb.String(), "event delivery, 100 subscriber(s)") {
		t.Fatalf("report lacks a case:\n%s", sb.String())
	}
}

// TestCompare runs the paired cases on two daemons and checks that each side took every sample and
// that the comparison prints.
func TestCompare(t *testing.T) {
	a, b := inProcess(t), inProcess(t)
	ps, err := compare(context.Background(), a, b, Bounds{Count: 4, Duration: time.Minute}, "test")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"exec true", "exec 1 MiB output", "file write 4 KiB", "file write 1 MiB", "file read 4 KiB",
		"file read 1 MiB", "get one sandbox", "event delivery, 1 stream", "event delivery, 100 streams (the last)", "create-to-ready"}
	if len(ps) != len(want) {
		t.Fatalf("got %d paired cases, want %d", len(ps), len(want))
	}
	for i, p := range ps {
		if p.Case != want[i] || p.Candidate.N != 4 || p.Baseline.N != 4 || p.Candidate.P50 <= 0 ||
			p.Baseline.P50 <= 0 || p.P50Ratio <= 0 || p.Faster < 0 || p.Faster > 1 {
			t.Errorf("paired case %d: %+v", i, p)
		}
	}
	var sb strings.Builder
	printText(&sb, &Report{Provider: "host", Compared: ps})
	if !strings.Contains(sb.String(), "create-to-ready") || strings.Contains(sb.String(), "mean ms") {
		t.Fatalf("comparison report:\n%s", sb.String())
	}
}

// TestRounds runs the cases three times against a running daemon and checks that every ratio and every
// case's p50 is reported for each round, with its median and range, and that the spreads print.
func TestRounds(t *testing.T) {
	c := inProcess(t)
	rep, err := run(context.Background(), options{url: c.base, floors: true, rounds: 3,
		bounds: Bounds{Count: 2, Duration: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Ratios) == 0 || len(rep.Rounds) != len(rep.Ratios) {
		t.Fatalf("ratios %+v, rounds %+v", rep.Ratios, rep.Rounds)
	}
	for i, sp := range rep.Rounds {
		if sp.Case != rep.Ratios[i].Case || sp.Floor != rep.Ratios[i].Floor || len(sp.Rounds) != 3 ||
			sp.Rounds[2] != rep.Ratios[i].P50 || !(sp.Min <= sp.Median && sp.Median <= sp.Max) ||
			sp.Min != slices.Min(sp.Rounds) || sp.Max != slices.Max(sp.Rounds) {
			t.Errorf("spread %d: %+v (last round's ratio %+v)", i, sp, rep.Ratios[i])
		}
	}
	all := append(slices.Clip(rep.Cases), rep.Floors...)
	if len(rep.RoundP50) != len(all) {
		t.Fatalf("p50 spreads of %d cases and floors, want %d", len(rep.RoundP50), len(all))
	}
	for i, sp := range rep.RoundP50 {
		if sp.Case != all[i].Name || sp.Floor != "" || len(sp.Rounds) != 3 || sp.Rounds[2] != all[i].P50 ||
			!(sp.Min <= sp.Median && sp.Median <= sp.Max) || sp.Min <= 0 {
			t.Errorf("p50 spread %d: %+v (last round %+v)", i, sp, all[i])
		}
	}
	var sb strings.Builder
	printText(&sb, rep)
	if !strings.Contains(sb.String(), "ratio over 3 rounds") || !strings.Contains(sb.String(), "p50 ms over 3 rounds") {
		t.Fatalf("report lacks the rounds:\n%s", sb.String())
	}
}

// TestImageCases runs the image cases, two samples each, on daemons of the oci provider, and checks
// that every case and floor took its samples, that each ratio is reported and prints, and that the
// daemon is left with no live sandbox, no snapshot and no image of the bench.
func TestImageCases(t *testing.T) {
	if ok, why := oci.Available(); !ok {
		t.Skip(why)
	}
	ctx := context.Background()
	tmp := testenv.StateDir(t)
	pullDir := testBusybox(t)
	o := options{sandboxd: testenv.BuildAgent(t), provider: "oci", start: true, images: true, bounds: Bounds{Count: 2, Duration: time.Minute},
		pullImage: pullDir, pullCount: 2}
	dm, err := startDaemon(ctx, o.sandboxd, "oci", filepath.Join(tmp, "daemon"))
	if err != nil {
		t.Fatal(err)
	}
	defer dm.stop()
	ir, err := imageCases(ctx, o, tmp, "test", dm)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"create-to-ready, cached image", "snapshot, 100 MiB of changes", "fork of 10, until all ready",
		"fork of one, until ready", "create-to-ready, image's warm pool of 1", "pull + unpack"}
	floors, notes := 5, 0
	if !pullTools() {
		floors, notes = 4, 1 // the pull case's floor is not measured, and a note says so
	}
	if len(ir.cases) != len(want) || len(ir.floors) != floors || len(ir.ratios) != floors || len(ir.notes) != notes {
		t.Fatalf("cases %+v, floors %+v, ratios %+v", ir.cases, ir.floors, ir.ratios)
	}
	for i, r := range ir.cases {
		n := 2
		if i == 2 {
			n = 1 // a fork of 10 is ten creates: Count/10 samples, at least one
		}
		if r.Name != want[i] || r.N != n || r.P50 <= 0 || r.P50 > r.P99 {
			t.Errorf("case %d: %+v", i, r)
		}
	}
	for i, f := range ir.floors {
		if !strings.HasPrefix(f.Name, "floor: ") || f.P50 <= 0 || ir.ratios[i].Floor != f.Name || ir.ratios[i].P50 <= 0 {
			t.Errorf("floor %d: %+v, ratio %+v", i, f, ir.ratios[i])
		}
	}
	var sb strings.Builder
	printText(&sb, &Report{Provider: "oci", Cases: ir.cases, Floors: ir.floors, Ratios: ir.ratios})
	if !strings.Contains(sb.String(), "fork of one, until ready / floor: create-to-ready, cached image") {
		t.Fatalf("report lacks a ratio:\n%s", sb.String())
	}

	api, err := sbxclient.New(dm.url)
	if err != nil {
		t.Fatal(err)
	}
	list, err := api.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.State != sandbox.StateTerminated {
			t.Errorf("sandbox %s left %s", s.ID, s.State)
		}
	}
	if sns, err := api.Snapshots(ctx); err != nil || len(sns) != 0 {
		t.Errorf("snapshots left: %+v %v", sns, err)
	}
	imgs, err := api.Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range imgs {
		t.Errorf("image left: %+v", img)
	}
}

// testBusybox is the busybox layout the image cases import, written under t's temporary directory.
func testBusybox(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "busybox")
	if err := busyboxLayout(dir, hostBusybox); err != nil {
		t.Fatal(err)
	}
	return dir
}

// pullTools says whether the pull case's floor can be measured: skopeo and umoci are there.
func pullTools() bool {
	_, err1 := exec.LookPath("skopeo")
	_, err2 := exec.LookPath("umoci")
	return err1 == nil && err2 == nil
}

// TestPullCase runs the pull case, two samples, with the busybox image, and checks that the pull and
// its floor (or, without skopeo and umoci, a note saying why not) are reported with their ratio, and
// that the floor's directories are gone.
func TestPullCase(t *testing.T) {
	if ok, why := oci.Available(); !ok {
		t.Skip(why)
	}
	ctx := context.Background()
	tmp := testenv.StateDir(t)
	busybox := testBusybox(t)
	o := options{sandboxd: testenv.BuildAgent(t), provider: "oci", bounds: Bounds{Count: 2, Duration: time.Minute}, pullImage: busybox, pullCount: 5}
	out := &imageResults{}
	if err := pullCase(ctx, o, tmp, "", out); err != nil {
		t.Fatal(err)
	}
	if len(out.cases) != 1 || out.cases[0].Name != "pull + unpack" || out.cases[0].N != 2 || out.cases[0].P50 <= 0 {
		t.Fatalf("cases %+v", out.cases)
	}
	if !pullTools() {
		if len(out.floors) != 0 || len(out.notes) != 1 || !strings.Contains(out.notes[0], "floor not measured") {
			t.Fatalf("floors %+v, notes %q", out.floors, out.notes)
		}
		return
	}
	if len(out.floors) != 1 || out.floors[0].N != 2 || out.floors[0].P50 <= 0 || len(out.notes) != 0 ||
		len(out.ratios) != 1 || out.ratios[0].Floor != "floor: skopeo copy + umoci unpack" || out.ratios[0].P50 <= 0 {
		t.Fatalf("floors %+v, ratios %+v, notes %q", out.floors, out.ratios, out.notes)
	}
	if _, err := os.Stat(filepath.Join(tmp, "pullfloor")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the floor's directories are left: %v", err)
	}
}

// TestPullImage checks which image the pull case takes: the layout given, else the cached Debian
// base, else the busybox layout with a note.
func TestPullImage(t *testing.T) {
	busybox := testBusybox(t)
	img, what, note, err := pullImage(busybox, "")
	if err != nil || img == nil || note != "" || !strings.Contains(what, busybox) {
		t.Fatalf("%v %q %q %v", img, what, note, err)
	}
	t.Setenv("SANDBOXD_TEST_IMAGE_CACHE", t.TempDir()) // an empty cache
	img, what, note, err = pullImage("", busybox)
	if err != nil || img == nil || !strings.Contains(note, "not in the cache") || !strings.Contains(what, busybox) {
		t.Fatalf("%v %q %q %v", img, what, note, err)
	}
	if _, _, _, err := pullImage(t.TempDir(), busybox); err == nil {
		t.Fatal("an empty directory taken for a layout")
	}
}

func TestSpreads(t *testing.T) {
	r := func(p float64) []Ratio { return []Ratio{{Case: "c", Floor: "f", P50: p}} }
	got := spreads([][]Ratio{r(2.0), r(1.0), r(4.0), r(3.0)})
	if len(got) != 1 || got[0].Median != 2.5 || got[0].Min != 1 || got[0].Max != 4 ||
		!slices.Equal(got[0].Rounds, []float64{2, 1, 4, 3}) {
		t.Fatalf("%+v", got)
	}
	if got := spreads([][]Ratio{r(2.0), r(1.0), r(4.0)}); got[0].Median != 2 {
		t.Fatalf("odd count: %+v", got)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{},                                // neither --url nor --start
		{"--url", "http://10.0.0.1:8080"}, // not loopback
		{"--url", "http://127.0.0.1:1", "--start", "--sandboxd", "/bin/true"},
		{"--url", "http://127.0.0.1:1", "--growth", "10,x"},
		{"--url", "http://127.0.0.1:1", "--count", "0"},
		{"--url", "http://127.0.0.1:1", "--rounds", "0"},
		{"--url", "http://127.0.0.1:1", "--baseline", "/bin/true"}, // --baseline needs --start
		{"--url", "http://127.0.0.1:1", "--images"},                // --images needs --start
		{"--start", "--sandboxd", "/bin/true", "--provider", "host", "--images"},
	} {
		if _, err := parseFlags(args, &strings.Builder{}); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
	o, err := parseFlags([]string{"--url", "http://[::1]:8080/", "--growth", "10, 100"}, &strings.Builder{})
	if err != nil || o.url != "http://[::1]:8080" || len(o.growth) != 2 || o.growth[1] != 100 {
		t.Fatalf("%+v %v", o, err)
	}
}

// TestPaced checks the open loop's schedule: no request is sent before it is due, the samples stop at
// the count or at the deadline, and an error ends the case.
func TestPaced(t *testing.T) {
	ctx := context.Background()
	const n, rate = 4, 2000.0
	step := time.Duration(float64(time.Second) / rate)
	var mu sync.Mutex
	var sent []time.Time
	start := time.Now()
	r, err := paced(ctx, "p", n, rate, Bounds{Count: 100, Duration: time.Minute}, func() error {
		mu.Lock()
		sent = append(sent, time.Now())
		mu.Unlock()
		return nil
	})
	if err != nil || r.N != 100 {
		t.Fatalf("%+v %v", r, err)
	}
	slices.SortFunc(sent, func(a, b time.Time) int { return a.Compare(b) })
	for k, at := range sent {
		if due := start.Add(time.Duration(k) * step); at.Before(due) {
			t.Fatalf("request %d sent %v before it was due", k, due.Sub(at))
		}
	}

	r, err = paced(ctx, "p", n, rate, Bounds{Count: 1 << 20, Duration: 50 * time.Millisecond}, func() error { return nil })
	if err != nil || r.N < 1 || r.N > int(rate*0.05)+1 {
		t.Fatalf("50 ms at %v/s: %+v %v", rate, r, err)
	}

	calls := 0
	_, err = paced(ctx, "p", n, rate, Bounds{Count: 100, Duration: time.Minute}, func() error {
		mu.Lock()
		defer mu.Unlock()
		if calls++; calls == 5 {
			return errors.New("boom")
		}
		return nil
	})
	if err == nil || err.Error() != "boom" {
		t.Fatalf("an op's error: got %v", err)
	}
}

// TestCountHolds checks that clients asking for a sample at once never take more than Count between
// them: 64 clients whose ops overlap, in a closed loop and in an open one.
func TestCountHolds(t *testing.T) {
	ctx := context.Background()
	var calls atomic.Int64
	op := func() error {
		calls.Add(1)
		time.Sleep(time.Millisecond)
		return nil
	}
	b := Bounds{Count: 10, Duration: time.Minute}
	r, err := concurrent(ctx, "c", 64, b, op)
	if err != nil || r.N != 10 || calls.Load() != 10 {
		t.Fatalf("closed loop: %+v %v, %d calls", r, err, calls.Load())
	}
	calls.Store(0)
	r, err = paced(ctx, "p", 64, 64000, b, op)
	if err != nil || r.N != 10 || calls.Load() != 10 {
		t.Fatalf("open loop: %+v %v, %d calls", r, err, calls.Load())
	}
}

func TestSummarize(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	r := summarize("x", d, time.Second)
	if r.N != 100 || r.P50 != 51 || r.P90 != 90 || r.P99 != 99 || r.Throughput != 100 || r.Mean != 50.5 {
		t.Fatalf("%+v", r)
	}
	if d[0] != 100*time.Millisecond {
		t.Fatal("summarize reordered its input")
	}
}

// BenchmarkAPIGet64 is GET of one sandbox from 64 goroutines, in process, for a CPU profile of the
// API's read path.
func BenchmarkAPIGet64(b *testing.B) {
	c := inProcess(b)
	ctx := context.Background()
	sb, err := c.create(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(32) // 64 goroutines on 2 CPUs
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.get(ctx, sb.ID); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkAPIExecTrue is the exec round trip of true over HTTP, in process, on the host provider.
func BenchmarkAPIExecTrue(b *testing.B) { benchExecTrue(b, inProcess(b)) }

// BenchmarkAPIExecTrueOCI is BenchmarkAPIExecTrue on the oci provider (root and runc).
func BenchmarkAPIExecTrueOCI(b *testing.B) { benchExecTrue(b, inProcessOCI(b)) }

func benchExecTrue(b *testing.B, c *client) {
	ctx := context.Background()
	sb, err := c.create(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.exec(ctx, sb, "true"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAPIWrite1MiB and BenchmarkAPIRead1MiB are the 1 MiB file cases over HTTP, in process, on the
// host provider: the client's JSON, the API, the store and the file, without the agent's hop.
func BenchmarkAPIWrite1MiB(b *testing.B) {
	c, sb := benchSandbox(b)
	data := make([]byte, 1<<20)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.writeFile(context.Background(), sb, "f.bin", data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAPIRead1MiB(b *testing.B) {
	c, sb := benchSandbox(b)
	data := make([]byte, 1<<20)
	if err := c.writeFile(context.Background(), sb, "f.bin", data); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if got, err := c.readFile(context.Background(), sb, "f.bin"); err != nil || len(got) != len(data) {
			b.Fatal(len(got), err)
		}
	}
}

func benchSandbox(b *testing.B) (*client, sandboxDoc) {
	c := inProcess(b)
	sb, err := c.create(context.Background(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	return c, sb
}

// TestSandboxCgroups reads the memory charge of sandbox cgroups from a made-up cgroup tree, v1 and v2.
func TestSandboxCgroups(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
	}{
		{"v1", map[string]string{
			"memory/sandboxd-1a2b3c4d-sbx_a-g1/memory.usage_in_bytes": "2334720\n",
			"memory/sandboxd-1a2b3c4d-sbx_b-g2/memory.usage_in_bytes": "1048576\n",
			"memory/user.slice/memory.usage_in_bytes":                 "999999999\n",
			"pids/sandboxd-1a2b3c4d-sbx_a-g1/pids.current":            "3\n",
		}},
		{"v2", map[string]string{
			"sandboxd-1a2b3c4d-sbx_a-g1/memory.current": "2334720\n",
			"sandboxd-1a2b3c4d-sbx_b-g2/memory.current": "1048576\n",
			"system.slice/memory.current":               "999999999\n",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for name, content := range tc.files {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if n, kib := sandboxCgroups(root); n != 2 || kib != 2280+1024 {
				t.Fatalf("got %d cgroups, %d KiB; want 2, %d KiB", n, kib, 2280+1024)
			}
		})
	}
	if n, kib := sandboxCgroups(t.TempDir()); n != 0 || kib != 0 {
		t.Fatalf("an empty tree: %d cgroups, %d KiB", n, kib)
	}
}

// TestCPUTime: a process's CPU time counts its own work and that of the children it waited for.
func TestCPUTime(t *testing.T) {
	me := os.Getpid()
	childCPU := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	before, err := cpuTime(me)
	if err != nil {
		t.Fatal(err)
	}
	children := childCPU()
	// A child that computes for a while, waited for.
	if out, err := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	child := childCPU() - children
	after, err := cpuTime(me)
	if err != nil {
		t.Fatal(err)
	}
	// /proc counts in ticks of 10 ms: allow two of them.
	if got := after - before; got < child-20*time.Millisecond {
		t.Fatalf("CPU time grew by %v over a child that used %v", got, child)
	}
	if _, err := cpuTime(-1); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
	used, err := idleCPU(context.Background(), me, 10*time.Millisecond)
	if err != nil || used < 0 {
		t.Fatalf("idle CPU %v %v", used, err)
	}
}
