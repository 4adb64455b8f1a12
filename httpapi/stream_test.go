package httpapi

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/core"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/testenv/corestack"
	"github.com/sandboxd/sandbox/store/sqlite"
)

// streamLines opens the event stream at url and returns its status and its lines, a channel closed when
// the stream ends. The stream is closed when the test ends, before a server closed by an earlier cleanup.
func streamLines(t *testing.T, url string) (int, <-chan string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return resp.StatusCode, lines
}

// TestFilteredStreamOutlivesShortHistory keeps a stream filtered on one idle sandbox open while other
// sandboxes push the log far past its retention between two of its wake-ups: the stream must still
// deliver the idle sandbox's next event, not fall behind the history and end. (What it cannot outlive
// is its own sandbox's events being pruned before it reads them: that is a 410, as for any reader.)
func TestFilteredStreamOutlivesShortHistory(t *testing.T) {
	testenv.NoLeaks(t) // nor does the stream, its Watch or its heartbeat outlive the test
	ctx := context.Background()
	rt := corestack.New(t, &stubProvider{refs: map[sandbox.Ref]bool{}}, corestack.Unstarted(),
		corestack.Store(sqlite.Config{Retention: 8}),
		corestack.Core(func(c *core.Config) { c.ReconcileInterval = -1 })).Runtime
	_, srv := serve(t, Config{Runtime: rt, HeartbeatInterval: 5 * time.Millisecond})

	idle, err := rt.Create(ctx, sandbox.Spec{ClientRequestID: "idle"})
	if err != nil {
		t.Fatal(err)
	}
	status, lines := streamLines(t, srv.URL+"/v1/events/stream?sandboxId="+string(idle.ID))
	// The stream has read its first page once its opening comment arrives: only then may history go.
	if status != 200 {
		t.Fatalf("stream answered %d", status)
	}
	select {
	case l := <-lines:
		if l != ": stream" {
			t.Fatalf("first line %q", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not open")
	}
	var busy []sandbox.ID
	for i := range 40 {
		sb, err := rt.Create(ctx, sandbox.Spec{ClientRequestID: "busy-" + string(rune('a'+i%26)) + strings.Repeat("x", i)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rt.Terminate(ctx, sb.ID, 1); err != nil {
			t.Fatal(err)
		}
		busy = append(busy, sb.ID)
	}
	for _, id := range busy { // releases finish in the background: the burst ends when they have
		for {
			sb, err := rt.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if sb.State == sandbox.StateTerminated {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	// Three heartbeats sent after the burst: the stream has been woken by it since (a pending wake-up
	// is taken before the next tick is due), found nothing of its sandbox, and moved past the pruned
	// history. What the stream sent before (heartbeats of the burst's time) is drained first.
	for drained := false; !drained; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the filtered stream ended while unrelated history was pruned")
			}
			if strings.HasPrefix(l, "data: ") && !strings.Contains(l, string(idle.ID)) {
				t.Fatalf("the filtered stream delivered another sandbox's event: %s", l)
			}
		default:
			drained = true
		}
	}
	for beats := 0; beats < 3; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the filtered stream ended while unrelated history was pruned")
			}
			if l == ": heartbeat" {
				beats++
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no heartbeat within 10s")
		}
	}
	if _, err := rt.Terminate(ctx, idle.ID, 1); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the filtered stream ended instead of delivering the idle sandbox's termination")
			}
			if strings.HasPrefix(l, "data: ") && strings.Contains(l, `"to":"terminated"`) {
				if !strings.Contains(l, string(idle.ID)) {
					t.Fatalf("filtered stream delivered another sandbox's event: %s", l)
				}
				return
			}
		case <-timeout:
			t.Fatal("no termination event within 10s")
		}
	}
}
