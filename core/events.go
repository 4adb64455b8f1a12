package core

import (
	"context"

	"github.com/sandboxd/sandbox"
)

// Events returns a page of the event log after q.After (at most sandbox.MaxEventPage).
//
// Errors: ErrEventHistoryUnavailable when q.After is older than the retained history.
func (r *Runtime) Events(ctx context.Context, q sandbox.EventQuery) ([]sandbox.Event, error) {
	if q.Limit <= 0 || q.Limit > sandbox.MaxEventPage {
		q.Limit = sandbox.MaxEventPage
	}
	return r.store.Events(ctx, q)
}

// LastEventOf is the cursor of sandbox id's newest event (see sandbox.Store).
func (r *Runtime) LastEventOf(ctx context.Context, id sandbox.ID) (int64, error) {
	return r.store.LastEventOf(ctx, id)
}

// LastCursor is the cursor of the newest event ever appended (0 if none).
func (r *Runtime) LastCursor(ctx context.Context) (int64, error) {
	return r.store.LastCursor(ctx)
}

// Watch returns a channel that receives after events are appended, and a function to stop watching. The
// channel holds one signal: a watcher that has not drained it misses nothing (it reads the log from its
// cursor), and a slow watcher never blocks a writer.
func (r *Runtime) Watch() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	r.watchMu.Lock()
	r.watchers[ch] = struct{}{}
	r.watchMu.Unlock()
	return ch, func() {
		r.watchMu.Lock()
		delete(r.watchers, ch)
		r.watchMu.Unlock()
	}
}

// notify wakes every watcher without blocking.
func (r *Runtime) notify() {
	r.watchMu.Lock()
	defer r.watchMu.Unlock()
	for ch := range r.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// EventLogBounds returns the cursor of the newest event (0 if none) and, when the store can say
// (sandbox.PruneReporter), the cursor up to which the log has been pruned; pruned is -1 otherwise.
func (r *Runtime) EventLogBounds(ctx context.Context) (pruned, last int64, err error) {
	if last, err = r.store.LastCursor(ctx); err != nil {
		return 0, 0, err
	}
	pr, ok := r.store.(sandbox.PruneReporter)
	if !ok {
		return -1, last, nil
	}
	if pruned, err = pr.Pruned(ctx); err != nil {
		return 0, 0, err
	}
	return pruned, last, nil
}
