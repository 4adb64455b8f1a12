package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// transitionalBound is the documented bound (docs/reliability.md) on how long a sandbox may stay in a
// transitional state after a restart: start-up reconcile completes each interrupted transition or fails it.
const transitionalBound = 20 * time.Second

// crashRounds is how many times TestCrashLoop kills the daemon.
const crashRounds = 5

// lastAck is the newest acknowledged answer about one sandbox, and whether a call on it was still in
// flight when the daemon died (then the sandbox may have moved past the answer).
type lastAck struct {
	sb       sandbox.Sandbox
	inFlight bool
}

// ledger is what the clients of TestCrashLoop were told, across every round.
type ledger struct {
	*acked
	mu     sync.Mutex
	last   map[sandbox.ID]*lastAck
	events map[int64]sandbox.Event // every event a client was shown, by cursor
	calls  int
}

func (l *ledger) begin(id sandbox.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a := l.last[id]; a != nil {
		a.inFlight = true
	}
}

func (l *ledger) ack(sb *sandbox.Sandbox) {
	l.acked.sandbox(sb)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	l.last[sb.ID] = &lastAck{sb: *sb}
}

// settled is where a state goes without a client call; a quiescent sandbox acknowledged in one of these
// pairs may be found in either after a restart.
func settledFrom(s sandbox.State) []sandbox.State {
	switch s {
	case sandbox.StateRequested, sandbox.StateStarting:
		return []sandbox.State{s, sandbox.StateStarting, sandbox.StateReady, sandbox.StateFailed}
	case sandbox.StatePausing:
		return []sandbox.State{s, sandbox.StatePaused, sandbox.StateFailed}
	case sandbox.StateResuming:
		return []sandbox.State{s, sandbox.StateReady, sandbox.StateFailed}
	case sandbox.StateTerminating:
		return []sandbox.State{s, sandbox.StateTerminated}
	}
	return []sandbox.State{s}
}

// lifecycleClient drives its own sandboxes through create, pause, resume, a command, a file write,
// terminate and recreate, recording every acknowledged answer, until ctx ends.
func lifecycleClient(ctx context.Context, url, prefix string, l *ledger, rng *rand.Rand) {
	for i := 0; ctx.Err() == nil; i++ {
		key := fmt.Sprintf("%s-%d", prefix, i)
		var sb sandbox.Sandbox
		if call(ctx, "POST", url+"/v1/sandboxes", map[string]any{"clientRequestId": key}, &sb) != 201 {
			continue
		}
		l.acked.mu.Lock()
		l.creates[key] = &sb
		l.acked.mu.Unlock()
		l.ack(&sb)
		base := url + "/v1/sandboxes/" + string(sb.ID)
		for step := 0; step < 6 && ctx.Err() == nil; step++ {
			g := map[string]any{"expectedGeneration": sb.Generation}
			var got sandbox.Sandbox
			var path string
			switch rng.IntN(5) {
			case 0:
				path = "/actions/pause"
			case 1:
				path = "/actions/resume"
			case 2:
				path = "/actions/terminate"
			case 3:
				l.begin(sb.ID)
				call(ctx, "POST", base+"/commands", map[string]any{"expectedGeneration": sb.Generation, "argv": []string{"true"}}, nil)
				continue
			case 4:
				if sb.State != sandbox.StateTerminated {
					continue
				}
				path = "/actions/recreate"
				g["spec"] = map[string]any{"clientRequestId": fmt.Sprintf("%s-r%d", key, step)}
			}
			l.begin(sb.ID)
			if call(ctx, "POST", base+path, g, &got) == 200 {
				sb = got
				l.ack(&got)
			}
		}
		var page struct{ Events []sandbox.Event }
		if call(ctx, "GET", url+"/v1/events?after=0&sandboxId="+string(sb.ID), nil, &page) == 200 {
			l.mu.Lock()
			for _, ev := range page.Events {
				l.events[ev.Cursor] = ev
			}
			l.mu.Unlock()
		}
	}
}

func crashSeed(t *testing.T) uint64 {
	if v := os.Getenv("SANDBOXD_CRASH_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SANDBOXD_CRASH_SEED=%q: %v", v, err)
		}
		return s
	}
	return uint64(time.Now().UnixNano())
}

// TestCrashLoop SIGKILLs the daemon at random moments of a busy workload, crashRounds times, restarts it
// on the same data dir each time and checks, beyond what checkRecovered checks: every event a client was
// shown is still there unchanged; every sandbox whose last call was acknowledged is in the acknowledged
// state or where that state settles; no provider resource (a host directory) exists without a live
// sandbox generation, and no ready or paused sandbox is without one.
func TestCrashLoop(t *testing.T) {
	seed := crashSeed(t)
	t.Logf("seed %d (replay the kill moments with SANDBOXD_CRASH_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	dataDir := testenv.StateDir(t)
	l := &ledger{
		acked:  &acked{creates: map[string]*sandbox.Sandbox{}, gens: map[sandbox.ID]sandbox.Generation{}},
		last:   map[sandbox.ID]*lastAck{},
		events: map[int64]sandbox.Event{},
	}
	var lastCursor int64
	for round := range crashRounds {
		d := startDaemon(t, dataDir)
		checkRecovered(t, d, l.acked, lastCursor)
		checkCrashInvariants(t, d, dataDir, l)

		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := range 6 {
			wg.Add(1)
			crng := rand.New(rand.NewPCG(seed, uint64(round*100+w+1)))
			go func() {
				defer wg.Done()
				if w%3 == 0 {
					busyClient(ctx, d.url, fmt.Sprintf("c%d-b%d", round, w), l.acked)
				} else {
					lifecycleClient(ctx, d.url, fmt.Sprintf("c%d-l%d", round, w), l, crng)
				}
			}()
		}
		time.Sleep(time.Duration(200+rng.IntN(1300)) * time.Millisecond)
		d.kill()
		cancel()
		wg.Wait()
		l.mu.Lock()
		for c := range l.events {
			lastCursor = max(lastCursor, c)
		}
		l.mu.Unlock()
		lastCursor = max(lastCursor, l.acked.cursorMax)
	}
	d := startDaemon(t, dataDir)
	checkRecovered(t, d, l.acked, lastCursor)
	checkCrashInvariants(t, d, dataDir, l)
	t.Logf("%d crashes survived; %d acknowledged creates, %d acknowledged lifecycle answers, %d events checked",
		crashRounds, len(l.creates), l.calls, len(l.events))
	if len(l.last) == 0 || len(l.events) == 0 {
		t.Fatal("nothing was acknowledged: the test checked nothing")
	}
}

// checkCrashInvariants runs once start-up reconcile has settled every sandbox (checkRecovered waits for it).
func checkCrashInvariants(t *testing.T, d *daemon, dataDir string, l *ledger) {
	t.Helper()
	ctx := context.Background()
	var list struct{ Sandboxes []sandbox.Sandbox }
	if st := call(ctx, "GET", d.url+"/v1/sandboxes", nil, &list); st != 200 {
		t.Fatalf("list: %d", st)
	}
	byID := map[sandbox.ID]sandbox.Sandbox{}
	for _, sb := range list.Sandboxes {
		byID[sb.ID] = sb
	}
	l.mu.Lock()
	defer l.mu.Unlock()

	// Acknowledged lifecycle answers of quiescent sandboxes hold.
	for id, a := range l.last {
		got, ok := byID[id]
		if !ok {
			t.Fatalf("acknowledged sandbox %s lost", id)
		}
		if a.inFlight {
			if got.Generation < a.sb.Generation {
				t.Fatalf("sandbox %s went back from generation %d to %d", id, a.sb.Generation, got.Generation)
			}
			continue
		}
		want := settledFrom(a.sb.State)
		if got.Generation != a.sb.Generation || !containsState(want, got.State) {
			t.Fatalf("sandbox %s was acknowledged g%d %s and nothing more was asked; after restart it is g%d %s (want one of %v)",
				id, a.sb.Generation, a.sb.State, got.Generation, got.State, want)
		}
	}
	checkEventsKept(t, d, l.events)
	// Provider resources and live generations match both ways.
	entries, err := os.ReadDir(filepath.Join(dataDir, "host"))
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() {
			if base, ok := strings.CutSuffix(name, ".paused"); ok {
				dirs[base] = dirs[base] || false
			}
			continue
		}
		dirs[name] = true
	}
	for name, isDir := range dirs {
		i := strings.LastIndex(name, "-g")
		gen, _ := strconv.ParseInt(name[i+2:], 10, 64)
		sb, ok := byID[sandbox.ID(name[:i])]
		if !ok || int64(sb.Generation) != gen || sb.State == sandbox.StateTerminated {
			t.Fatalf("provider resource %s (directory %v) belongs to no live sandbox generation (sandbox: %+v)", name, isDir, sb)
		}
	}
	for _, sb := range list.Sandboxes {
		if (sb.State == sandbox.StateReady || sb.State == sandbox.StatePaused) && !dirs[sb.Ref().Name()] {
			t.Fatalf("sandbox %s is %s but its provider resource is gone", sb.ID, sb.State)
		}
	}
}

func containsState(list []sandbox.State, s sandbox.State) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// checkEventsKept checks that every event a client was shown is in d's log, unchanged.
func checkEventsKept(t *testing.T, d *daemon, shown map[int64]sandbox.Event) {
	t.Helper()
	have := map[int64]sandbox.Event{}
	for _, ev := range allEvents(t, d) {
		have[ev.Cursor] = ev
	}
	for c, ev := range shown {
		got, ok := have[c]
		if !ok || got.Type != ev.Type || got.SandboxID != ev.SandboxID || got.Generation != ev.Generation || string(got.Data) != string(ev.Data) {
			t.Fatalf("event %d was shown as %+v; after restart: %+v (present %v)", c, ev, got, ok)
		}
	}
}
