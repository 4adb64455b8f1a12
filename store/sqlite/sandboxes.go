package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	sandbox "github.com/sandboxd/sandbox"
)

// Create records sb with its create intent and events in one transaction. When intent.Key is already
// recorded nothing is written: the same canonical spec for the sandbox's current generation returns
// the sandbox as it is now with created=false, anything else ErrIdempotencyConflict. An intent with no
// SandboxID or Generation takes sb's; one naming another sandbox is ErrInvalidRequest. When the
// sandbox is created, the Cursor fields of events are set in place.
func (s *Store) Create(ctx context.Context, sb *sandbox.Sandbox, intent sandbox.Intent, events []sandbox.Event) (*sandbox.Sandbox, bool, error) {
	if sb == nil || sb.ID == "" {
		return nil, false, fmt.Errorf("create: no sandbox id: %w", sandbox.ErrInvalidRequest)
	}
	if intent.Key == "" {
		return nil, false, fmt.Errorf("create %s: no intent key: %w", sb.ID, sandbox.ErrInvalidRequest)
	}
	if intent.SandboxID == "" {
		intent.SandboxID = sb.ID
	}
	if intent.Generation == 0 {
		intent.Generation = sb.Generation
	}
	if intent.SandboxID != sb.ID || intent.Generation != sb.Generation {
		return nil, false, fmt.Errorf("create %s generation %d: intent names %s generation %d: %w",
			sb.ID, sb.Generation, intent.SandboxID, intent.Generation, sandbox.ErrInvalidRequest)
	}
	doc, err := marshalSandbox(sb)
	if err != nil {
		return nil, false, fmt.Errorf("create %s: %w", sb.ID, err)
	}

	stored, err := unmarshalSandbox(doc) // what Get will return: UTC times, compact JSON
	if err != nil {
		return nil, false, fmt.Errorf("create %s: %w", sb.ID, err)
	}

	var (
		got     *sandbox.Sandbox
		created bool
		cursors []int64
	)
	err = s.write(ctx, func() error {
		var (
			id   sandbox.ID
			gen  sandbox.Generation
			spec []byte
		)
		err := s.ws.scan(ctx, qGetIntent,
			[]any{intent.Key}, &id, &gen, &spec)
		if err == nil {
			cur, ok := s.cache.get(id)
			if !ok {
				return fmt.Errorf("create: intent %q names %s, which is not recorded", intent.Key, id)
			}
			if !bytes.Equal(spec, intent.Spec) {
				return fmt.Errorf("create: clientRequestId %q was used for another spec: %w", intent.Key, sandbox.ErrIdempotencyConflict)
			}
			if gen != cur.Generation {
				return fmt.Errorf("create: clientRequestId %q made %s generation %d, now at generation %d: %w",
					intent.Key, id, gen, cur.Generation, sandbox.ErrIdempotencyConflict)
			}
			got = cur
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("create: look up intent %q: %w", intent.Key, err)
		}
		if _, err := s.ws.exec(ctx, qInsertSandbox,
			sb.ID, sb.Generation, sb.State, doc); err != nil {
			return fmt.Errorf("create %s: %w", sb.ID, err)
		}
		if err := s.insertIntent(ctx, intent); err != nil {
			return err
		}
		if cursors, err = s.appendEvents(ctx, events); err != nil {
			return fmt.Errorf("create %s: %w", sb.ID, err)
		}
		created = true
		return nil
	}, func() {
		if created {
			s.cache.put(stored)
			got = stored
		}
	})
	if err != nil {
		return nil, false, err
	}
	for i := range cursors {
		events[i].Cursor = cursors[i]
	}
	return clone(got), created, nil
}

// Get returns one sandbox, or ErrNotFound.
func (s *Store) Get(ctx context.Context, id sandbox.ID) (*sandbox.Sandbox, error) {
	sb, ok := s.cache.get(id)
	if !ok {
		return nil, fmt.Errorf("sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	return clone(sb), nil
}

// List returns every sandbox, in the order they were created.
func (s *Store) List(ctx context.Context) ([]*sandbox.Sandbox, error) {
	return s.cache.list(), nil
}

// Update reads the sandbox, applies fn to a copy and writes the result with its events and new intent
// in one transaction; writes are serialized, so no other update interleaves. A result that changes
// nothing (the same document, no event, no intent) is not written. It returns ErrNotFound
// for an unknown id, ErrIdempotencyConflict when the new intent's key is taken, fn's error as it is,
// and ErrInvalidRequest when fn changes the sandbox's id. On any error nothing is written.
func (s *Store) Update(ctx context.Context, id sandbox.ID, fn sandbox.UpdateFunc) (*sandbox.Sandbox, []sandbox.Event, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("update %s: %w", id, err)
	}
	cur, ok := s.cache.get(id) // under the write lock the cache is what is committed
	if !ok {
		return nil, nil, fmt.Errorf("sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	sb := clone(cur)
	ch, err := fn(sb)
	if err != nil {
		return nil, nil, err
	}
	if sb.ID != id {
		return nil, nil, fmt.Errorf("update %s: the update changed the id to %s: %w", id, sb.ID, sandbox.ErrInvalidRequest)
	}
	doc, err := marshalSandbox(sb)
	if err != nil {
		return nil, nil, fmt.Errorf("update %s: %w", id, err)
	}
	if ch.Intent == nil && len(ch.Events) == 0 {
		// Nothing to write when the document is the one stored (a reconcile that found the sandbox as
		// recorded): no transaction, no WAL frame.
		if was, err := marshalSandbox(cur); err == nil && bytes.Equal(doc, was) {
			return clone(cur), nil, nil
		}
	}
	stored, err := unmarshalSandbox(doc)
	if err != nil {
		return nil, nil, fmt.Errorf("update %s: %w", id, err)
	}
	var events []sandbox.Event
	err = s.writeLocked(ctx, func() error {
		if _, err := s.ws.exec(ctx, qUpdateSandbox,
			sb.Generation, sb.State, doc, id); err != nil {
			return fmt.Errorf("update %s: %w", id, err)
		}
		if ch.Intent != nil {
			in := *ch.Intent
			if in.SandboxID == "" {
				in.SandboxID = id
			}
			if in.Generation == 0 {
				in.Generation = sb.Generation
			}
			if in.Key == "" || in.SandboxID != id {
				return fmt.Errorf("update %s: bad intent %q for %s: %w", id, in.Key, in.SandboxID, sandbox.ErrInvalidRequest)
			}
			if err := s.insertIntent(ctx, in); err != nil {
				return err
			}
		}
		cursors, err := s.appendEvents(ctx, ch.Events)
		if err != nil {
			return fmt.Errorf("update %s: %w", id, err)
		}
		events = withCursors(ch.Events, cursors)
		return nil
	}, func() { s.cache.put(stored) })
	if err != nil {
		return nil, nil, err
	}
	return clone(stored), events, nil
}

// insertIntent records in, or returns ErrIdempotencyConflict when its key is taken.
func (s *Store) insertIntent(ctx context.Context, in sandbox.Intent) error {
	spec := in.Spec
	if spec == nil {
		spec = []byte{}
	}
	res, err := s.ws.exec(ctx, qInsertIntent, in.Key, in.SandboxID, in.Generation, spec)
	if err != nil {
		return fmt.Errorf("record intent %q: %w", in.Key, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("record intent %q: %w", in.Key, err)
	}
	if n == 0 {
		return fmt.Errorf("clientRequestId %q is already used: %w", in.Key, sandbox.ErrIdempotencyConflict)
	}
	return nil
}

// marshalSandbox encodes sb with its times in UTC, so what is read back equals what was written.
func marshalSandbox(sb *sandbox.Sandbox) ([]byte, error) {
	c := *sb
	c.CreatedAt = c.CreatedAt.UTC()
	c.UpdatedAt = c.UpdatedAt.UTC()
	return json.Marshal(&c)
}

func unmarshalSandbox(doc []byte) (*sandbox.Sandbox, error) {
	sb := new(sandbox.Sandbox)
	if err := json.Unmarshal(doc, sb); err != nil {
		return nil, fmt.Errorf("decode sandbox: %w", err)
	}
	return sb, nil
}
