package sqlite_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	sandbox "github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/store/sqlite"
)

// TestEventTailMatchesFile appends past the in-memory tail's size with a small retention, then checks
// that every page, served from memory or from the file, equals the page a freshly opened store (which
// reads only the file) returns, including the history-unavailable answers.
func TestEventTailMatchesFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := sqlite.Open(ctx, sqlite.Config{Path: path, Retention: 3000})
	if err != nil {
		t.Fatal(err)
	}
	ids := []sandbox.ID{sandbox.NewID(), sandbox.NewID()}
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	for i := 0; i < 5000; i += 10 {
		batch := make([]sandbox.Event, 10)
		for j := range batch {
			data, _ := json.Marshal(sandbox.FileWrittenData{Path: fmt.Sprint(i + j), Size: int64(j)})
			batch[j] = sandbox.Event{Type: sandbox.EventFileWritten, SandboxID: ids[(i+j)%2], Generation: 1,
				Timestamp: at.Add(time.Duration(i+j) * time.Millisecond), Data: data}
		}
		if _, err := s.AppendEvents(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	var live [][]sandbox.Event
	var liveErr []error
	queries := []sandbox.EventQuery{}
	for _, after := range []int64{0, 1000, 1999, 2000, 2500, 4000, 4990, 5000, 6000} {
		for _, id := range []sandbox.ID{"", ids[1]} {
			queries = append(queries, sandbox.EventQuery{After: after, SandboxID: id, Limit: 50})
		}
	}
	for _, q := range queries {
		evs, err := s.Events(ctx, q)
		live, liveErr = append(live, evs), append(liveErr, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fresh, err := sqlite.Open(ctx, sqlite.Config{Path: path, Retention: 3000})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	served := 0
	for i, q := range queries {
		evs, err := fresh.Events(ctx, q)
		if !errors.Is(err, sandbox.ErrEventHistoryUnavailable) && err != nil {
			t.Fatalf("%+v: %v", q, err)
		}
		if (err == nil) != (liveErr[i] == nil) || (err != nil && !errors.Is(liveErr[i], sandbox.ErrEventHistoryUnavailable)) {
			t.Fatalf("%+v: file says %v, the open store said %v", q, err, liveErr[i])
		}
		if !reflect.DeepEqual(evs, live[i]) {
			t.Fatalf("%+v: file has %d events, the open store gave %d", q, len(evs), len(live[i]))
		}
		served += len(evs)
	}
	if served == 0 {
		t.Fatal("no query returned events: the comparison checked nothing")
	}
}
