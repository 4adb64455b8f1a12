package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"strings"

	"github.com/sandboxd/sandbox"
)

// NetworkPolicy is a sandbox's egress policy (the sandboxd.network key of spec.extensions).
type NetworkPolicy struct {
	Egress string   `json:"egress,omitempty"` // "deny" or "allow"; empty: the daemon's default
	Allow  []string `json:"allow,omitempty"`  // CIDRs, addresses, names, "*.wildcards"
	Deny   []string `json:"deny,omitempty"`
}

// Network is a sandbox's network now: the policy that holds, what its rules counted, its recent
// denials (newest first), and the generation it is of.
type Network struct {
	Generation         sandbox.Generation      `json:"generation"`
	Policy             NetworkPolicy           `json:"policy"`
	AllowedConnections uint64                  `json:"allowedConnections"`
	DeniedConnections  uint64                  `json:"deniedConnections"`
	Denials            []sandbox.NetworkDenial `json:"denials"`
}

// Network returns a ready or paused sandbox's network. Errors: ErrNotFound, ErrInvalidState,
// ErrUnsupportedCapability, ErrProviderUnavailable.
func (c *Client) Network(ctx context.Context, id sandbox.ID) (*Network, error) {
	var n Network
	if err := c.do(ctx, call{method: "GET", path: sandboxPath(id) + "/network", safe: true}, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// SetNetwork makes policy generation gen's for every new connection. Errors: ErrInvalidRequest,
// ErrNotFound, ErrGenerationConflict, ErrInvalidState, ErrUnsupportedCapability,
// ErrProviderUnavailable.
func (c *Client) SetNetwork(ctx context.Context, id sandbox.ID, gen sandbox.Generation, policy NetworkPolicy) (*Network, error) {
	raw, err := json.Marshal(policy)
	if err != nil {
		return nil, err
	}
	body := struct {
		ExpectedGeneration sandbox.Generation `json:"expectedGeneration"`
		Policy             json.RawMessage    `json:"policy"`
	}{gen, raw}
	var n Network
	if err := c.do(ctx, call{method: "PUT", path: sandboxPath(id) + "/network", body: body}, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// NetworkDenialsEnd is why a stream of denials ended: the error code the sandbox's network answers
// now (not_found once it is gone, invalid_state once it is terminated, generation_conflict once it
// was recreated).
type NetworkDenialsEnd struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// NetworkDenials streams the sandbox's denials: the recent ones, then each new one, until ctx ends or
// the generation it began on is no longer ready or paused, which the last value tells (a non-nil end,
// no denial). Errors: as Network, and ErrProviderProtocol for a garbled stream.
func (c *Client) NetworkDenials(ctx context.Context, id sandbox.ID) iter.Seq2[*sandbox.NetworkDenial, *NetworkDenialsEnd] {
	return func(yield func(*sandbox.NetworkDenial, *NetworkDenialsEnd) bool) {
		_ = c.networkDenials(ctx, id, yield)
	}
}

// StreamNetworkDenials is NetworkDenials with its error: it calls fn for each denial and returns the
// stream's end (nil when ctx ended first or fn returned false).
func (c *Client) StreamNetworkDenials(ctx context.Context, id sandbox.ID, fn func(sandbox.NetworkDenial) bool) (*NetworkDenialsEnd, error) {
	var end *NetworkDenialsEnd
	err := c.networkDenials(ctx, id, func(d *sandbox.NetworkDenial, e *NetworkDenialsEnd) bool {
		if e != nil {
			end = e
			return false
		}
		return fn(*d)
	})
	return end, err
}

func (c *Client) networkDenials(ctx context.Context, id sandbox.ID, yield func(*sandbox.NetworkDenial, *NetworkDenialsEnd) bool) error {
	k := call{method: "GET", path: sandboxPath(id) + "/network/denials", header: http.Header{"Accept": {"text/event-stream"}}}
	resp, err := c.send(ctx, k)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return &protocolError{fmt.Sprintf("denial stream has content type %q", ct)}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	var name string
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			name = v
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		switch name {
		case "denial":
			var d sandbox.NetworkDenial
			if err := json.Unmarshal([]byte(data), &d); err != nil {
				return &protocolError{"a denial that is not JSON"}
			}
			if !yield(&d, nil) {
				return nil
			}
		case "end":
			var e NetworkDenialsEnd
			if err := json.Unmarshal([]byte(data), &e); err != nil {
				return &protocolError{"an end that is not JSON"}
			}
			yield(nil, &e)
			return nil
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return &protocolError{"the denial stream closed without its end"}
}
