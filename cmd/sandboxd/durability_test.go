package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// daemon is a sandboxd process started by a test.
type daemon struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{}
}

var servingRE = regexp.MustCompile(`msg=serving addr=(\S+)`)

// startDaemon runs the built binary on dataDir with the host provider on a free loopback port, and waits
// until it serves.
func startDaemon(t *testing.T, dataDir string, extra ...string) *daemon {
	t.Helper()
	return startDaemonBin(t, testenv.BuildAgent(t), dataDir, extra...)
}

// startDaemonBin is startDaemon with another build of the daemon.
func startDaemonBin(t *testing.T, bin, dataDir string, extra ...string) *daemon {
	t.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--provider", "host"}, extra...)
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	var logs bytes.Buffer
	var logMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			logs.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		_ = cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() { d.kill() })
	select {
	case a := <-addr:
		d.url = "http://" + a
	case <-d.done:
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("sandboxd exited before serving:\n%s", logs.String())
	case <-time.After(30 * time.Second):
		t.Fatal("sandboxd did not serve within 30s")
	}
	return d
}

func (d *daemon) kill() {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

// call sends a JSON request and decodes a JSON answer into out (when given). It returns the status, or 0
// when the request did not complete.
func call(ctx context.Context, method, url string, body, out any) int {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0 // the answer was cut: not acknowledged
	}
	if out != nil && json.Unmarshal(raw, out) != nil {
		return 0
	}
	return resp.StatusCode
}

// acked is what the daemon acknowledged before it was killed.
type acked struct {
	mu        sync.Mutex
	creates   map[string]*sandbox.Sandbox       // clientRequestId -> sandbox as acknowledged
	gens      map[sandbox.ID]sandbox.Generation // highest acknowledged generation
	cursorMax int64
}

func (a *acked) sandbox(sb *sandbox.Sandbox) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if sb.Generation > a.gens[sb.ID] {
		a.gens[sb.ID] = sb.Generation
	}
}

// TestDurabilityUnderSIGKILL kills the daemon with SIGKILL while creates, actions, commands and file
// writes are in flight, restarts it on the same data dir, and checks that every acknowledged sandbox,
// generation and event is there, that no cursor is reused, that idempotent creates still return the same
// sandbox, and that no sandbox stays in a transitional state.
func TestDurabilityUnderSIGKILL(t *testing.T) {
	dataDir := testenv.StateDir(t)
	a := &acked{creates: map[string]*sandbox.Sandbox{}, gens: map[sandbox.ID]sandbox.Generation{}}
	rng := rand.New(rand.NewPCG(1, 2))
	const rounds = 3
	var lastCursor int64
	for round := range rounds {
		d := startDaemon(t, dataDir)
		checkRecovered(t, d, a, lastCursor)

		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				busyClient(ctx, d.url, fmt.Sprintf("r%d-w%d", round, w), a)
			}()
		}
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
		d.kill()
		cancel()
		wg.Wait()

		// Everything the event log had that a client saw must survive: read the newest cursor next round.
		lastCursor = a.cursorMax
	}
	d := startDaemon(t, dataDir)
	checkRecovered(t, d, a, lastCursor)
	t.Logf("%d kills survived; %d acknowledged creates, %d sandboxes, newest cursor seen %d", rounds, len(a.creates), len(a.gens), lastCursor)
	if len(a.creates) == 0 {
		t.Fatal("no create was acknowledged: the test checked nothing")
	}
}

// busyClient creates sandboxes and acts on them until ctx ends, recording what was acknowledged.
func busyClient(ctx context.Context, url, prefix string, a *acked) {
	for i := 0; ctx.Err() == nil; i++ {
		key := fmt.Sprintf("%s-%d", prefix, i)
		var sb sandbox.Sandbox
		if call(ctx, "POST", url+"/v1/sandboxes", map[string]any{"clientRequestId": key}, &sb) != 201 {
			continue
		}
		a.mu.Lock()
		a.creates[key] = &sb
		a.mu.Unlock()
		a.sandbox(&sb)
		base := fmt.Sprintf("%s/v1/sandboxes/%s", url, sb.ID)
		gen := sb.Generation
		var res sandbox.CommandResult
		call(ctx, "POST", base+"/commands", map[string]any{"expectedGeneration": gen, "argv": []string{"true"}}, &res)
		call(ctx, "PUT", base+"/files/content", map[string]any{"expectedGeneration": gen, "path": "f.txt", "contentBase64": "aGk="}, nil)
		if i%2 == 0 {
			var got sandbox.Sandbox
			if call(ctx, "POST", base+"/actions/terminate", map[string]any{"expectedGeneration": gen}, &got) == 200 {
				a.sandbox(&got)
				if call(ctx, "POST", base+"/actions/recreate", map[string]any{"expectedGeneration": gen,
					"spec": map[string]any{"clientRequestId": key + "-again"}}, &got) == 200 {
					a.sandbox(&got)
				}
			}
		}
		var page struct{ Events []sandbox.Event }
		if call(ctx, "GET", url+"/v1/events?after=0&sandboxId="+string(sb.ID), nil, &page) == 200 && len(page.Events) > 0 {
			a.mu.Lock()
			a.cursorMax = max(a.cursorMax, page.Events[len(page.Events)-1].Cursor)
			a.mu.Unlock()
		}
	}
}

// checkRecovered checks a restarted daemon against what was acknowledged before the kill.
func checkRecovered(t *testing.T, d *daemon, a *acked, lastCursor int64) {
	t.Helper()
	ctx := context.Background()
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, sb := range a.creates {
		var got sandbox.Sandbox
		if st := call(ctx, "GET", d.url+"/v1/sandboxes/"+string(sb.ID), nil, &got); st != 200 {
			t.Fatalf("acknowledged sandbox %s (%s) lost after restart: status %d", sb.ID, key, st)
		}
		if got.Generation < a.gens[sb.ID] {
			t.Fatalf("sandbox %s went back from generation %d to %d", sb.ID, a.gens[sb.ID], got.Generation)
		}
		if got.Generation == 1 {
			var again sandbox.Sandbox
			if st := call(ctx, "POST", d.url+"/v1/sandboxes", map[string]any{"clientRequestId": key}, &again); st != 201 || again.ID != sb.ID {
				t.Fatalf("idempotent create %s after restart: status %d, id %s, want 201 and %s", key, st, again.ID, sb.ID)
			}
		}
	}
	// Events: strictly increasing cursors, and every acknowledged sandbox has its created event.
	all := allEvents(t, d)
	after := int64(0)
	if len(all) > 0 {
		after = all[len(all)-1].Cursor
	}
	created := map[sandbox.ID]bool{}
	for i, ev := range all {
		if i > 0 && ev.Cursor <= all[i-1].Cursor {
			t.Fatalf("cursor %d after %d", ev.Cursor, all[i-1].Cursor)
		}
		if ev.Type == sandbox.EventCreated {
			created[ev.SandboxID] = true
		}
	}
	if after < lastCursor {
		t.Fatalf("newest cursor %d is older than %d, seen before the kill", after, lastCursor)
	}
	for _, sb := range a.creates {
		if !created[sb.ID] {
			t.Fatalf("created event of acknowledged sandbox %s lost", sb.ID)
		}
	}
	// A new event gets a cursor never used before.
	var sb sandbox.Sandbox
	key := fmt.Sprintf("probe-%d", after)
	if st := call(ctx, "POST", d.url+"/v1/sandboxes", map[string]any{"clientRequestId": key}, &sb); st != 201 {
		t.Fatalf("create after restart: %d", st)
	}
	var page struct{ Events []sandbox.Event }
	call(ctx, "GET", d.url+"/v1/events?after=0&sandboxId="+string(sb.ID), nil, &page)
	if len(page.Events) == 0 || page.Events[0].Cursor <= after {
		t.Fatalf("new event cursor reused: %+v after %d", page.Events, after)
	}
	// No sandbox stays transitional: start-up reconcile completes or fails each within a bound.
	deadline := time.Now().Add(transitionalBound)
	for {
		var list struct{ Sandboxes []sandbox.Sandbox }
		if st := call(ctx, "GET", d.url+"/v1/sandboxes", nil, &list); st != 200 {
			t.Fatalf("list: %d", st)
		}
		var stuck []string
		for _, s := range list.Sandboxes {
			if s.State.Transitional() {
				stuck = append(stuck, fmt.Sprintf("%s:%s", s.ID, s.State))
			}
		}
		if len(stuck) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandboxes still transitional %v after restart: %v", transitionalBound, stuck)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// allEvents pages through d's whole event log, oldest first.
func allEvents(t *testing.T, d *daemon) []sandbox.Event {
	t.Helper()
	var all []sandbox.Event
	after := int64(0)
	for {
		var page struct{ Events []sandbox.Event }
		if st := call(context.Background(), "GET", fmt.Sprintf("%s/v1/events?after=%d", d.url, after), nil, &page); st != 200 {
			t.Fatalf("events: status %d", st)
		}
		if len(page.Events) == 0 {
			return all
		}
		all = append(all, page.Events...)
		after = page.Events[len(page.Events)-1].Cursor
	}
}
