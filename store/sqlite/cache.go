package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"

	sandbox "github.com/sandboxd/sandbox"
)

// cache holds every sandbox as last committed, decoded, so Get and List cost no query and no JSON
// decoding. It is written only after a commit and while the write lock is held, so it never runs
// ahead of the file nor goes back in time; the values it holds are never mutated, and callers get
// clones.
type cache struct {
	mu    sync.RWMutex
	byID  map[sandbox.ID]*sandbox.Sandbox
	order []sandbox.ID // creation order
}

func (c *cache) get(id sandbox.ID) (*sandbox.Sandbox, bool) {
	c.mu.RLock()
	sb, ok := c.byID[id]
	c.mu.RUnlock()
	return sb, ok
}

// put records sb, created when it is new.
func (c *cache) put(sb *sandbox.Sandbox) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byID[sb.ID]; !ok {
		c.order = append(c.order, sb.ID)
	}
	c.byID[sb.ID] = sb
}

func (c *cache) list() []*sandbox.Sandbox {
	c.mu.RLock()
	out := make([]*sandbox.Sandbox, len(c.order))
	for i, id := range c.order {
		out[i] = c.byID[id]
	}
	c.mu.RUnlock()
	for i, sb := range out {
		out[i] = clone(sb)
	}
	return out
}

// load fills the cache from the file.
func (s *Store) load(ctx context.Context) error {
	rows, err := s.wc.QueryContext(ctx, `SELECT doc FROM sandboxes ORDER BY seq`)
	if err != nil {
		return fmt.Errorf("load sandboxes: %w", err)
	}
	defer rows.Close()
	c := &s.cache
	c.byID = map[sandbox.ID]*sandbox.Sandbox{}
	c.order = nil
	for rows.Next() {
		var doc []byte
		if err := rows.Scan(&doc); err != nil {
			return fmt.Errorf("load sandboxes: %w", err)
		}
		sb, err := unmarshalSandbox(doc)
		if err != nil {
			return fmt.Errorf("load sandboxes: %w", err)
		}
		c.put(sb)
	}
	return rows.Err()
}

// clone returns a deep copy of sb: the copy shares no map, slice or pointer with it.
func clone(sb *sandbox.Sandbox) *sandbox.Sandbox {
	c := *sb
	c.Spec = cloneSpec(sb.Spec)
	if sb.Endpoint != nil {
		e := *sb.Endpoint
		c.Endpoint = &e
	}
	if sb.Failure != nil {
		f := *sb.Failure
		c.Failure = &f
	}
	c.ProviderExtensions = cloneRaw(sb.ProviderExtensions)
	return &c
}

func cloneSpec(s sandbox.Spec) sandbox.Spec {
	if s.Resources != nil {
		r := *s.Resources
		s.Resources = &r
	}
	s.RequiredCapabilities = slices.Clone(s.RequiredCapabilities)
	s.Extensions = cloneRaw(s.Extensions)
	return s
}

func cloneRaw(m map[string]json.RawMessage) map[string]json.RawMessage {
	if m == nil {
		return nil
	}
	c := maps.Clone(m)
	for k, v := range c {
		c[k] = slices.Clone(v)
	}
	return c
}
