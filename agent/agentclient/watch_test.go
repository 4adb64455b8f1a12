package agentclient_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// TestWatchHeldOutlivesSilence: a watch whose agent says nothing ends, unavailable, once the silence
// bound passes; held (the sandbox paused, its agent frozen), it outlives many bounds, passes on the
// change that comes after, and ends again once released and the agent stays silent.
func TestWatchHeldOutlivesSilence(t *testing.T) {
	const silence = 100 * time.Millisecond
	defer agentclient.SetWatchSilence(silence)()
	speak := make(chan struct{})
	c := fake(t, agentclient.Wire{}, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != protocol.PathWatch {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-speak:
			w.Write([]byte(`{"kind":"created","path":"d/x"}` + "\n"))
			w.(http.Flusher).Flush()
		case <-r.Context().Done():
			return
		}
		<-r.Context().Done()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ended := func(w sandbox.FileWatch) {
		t.Helper()
		for range w.Changes() {
		}
		if err := w.Err(); !errors.Is(err, sandbox.ErrProviderUnavailable) {
			t.Fatalf("a silent agent's watch ended with %v", err)
		}
	}

	w, err := c.Watch(ctx, "d", false)
	if err != nil {
		t.Fatal(err)
	}
	ended(w)

	w, err = c.Watch(ctx, "d", false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.(sandbox.WatchHolder).Hold(true)
	select {
	case ch, ok := <-w.Changes():
		t.Fatalf("a held watch: %+v, %v", ch, ok)
	case <-time.After(20 * silence):
	}
	close(speak)
	if ch := <-w.Changes(); ch.Kind != sandbox.FileCreated || ch.Path != "d/x" {
		t.Fatalf("the change after the hold: %+v", ch)
	}
	w.(sandbox.WatchHolder).Hold(false)
	ended(w)
}
