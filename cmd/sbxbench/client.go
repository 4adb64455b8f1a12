package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// client is a minimal client of the daemon's HTTP API, enough to drive the cases.
type client struct {
	base string
	hc   *http.Client
}

func newClient(base string) *client {
	tr := &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute, DisableCompression: true}
	return &client{base: base, hc: &http.Client{Transport: tr}}
}

// sandboxDoc is the part of a sandbox resource the bench reads.
type sandboxDoc struct {
	ID         string `json:"id"`
	Generation int64  `json:"generation"`
	State      string `json:"state"`
}

// do sends one request and decodes a JSON answer with the wanted status into out (when not nil).
func (c *client) do(ctx context.Context, method, path string, in any, want int, out any) error {
	var body io.Reader
	if in != nil {
		raw, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, want, bytes.TrimSpace(msg))
	}
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// create makes a sandbox and waits until it is ready.
func (c *client) create(ctx context.Context, key string) (sandboxDoc, error) {
	return c.createWith(ctx, key, nil)
}

// createWith is create of a sandbox with resources (nil: none).
func (c *client) createWith(ctx context.Context, key string, resources map[string]any) (sandboxDoc, error) {
	spec := map[string]any{"clientRequestId": key}
	if resources != nil {
		spec["resources"] = resources
	}
	return c.createSpec(ctx, spec)
}

// createSpec makes a sandbox of spec and waits until it is ready.
func (c *client) createSpec(ctx context.Context, spec map[string]any) (sandboxDoc, error) {
	var sb sandboxDoc
	if err := c.do(ctx, http.MethodPost, "/v1/sandboxes", spec, http.StatusCreated, &sb); err != nil {
		return sb, err
	}
	return c.ready(ctx, sb)
}

// ready polls sb every millisecond until it is ready; failed or terminated is an error.
func (c *client) ready(ctx context.Context, sb sandboxDoc) (sandboxDoc, error) {
	for sb.State != "ready" {
		if sb.State == "failed" || sb.State == "terminated" {
			return sb, fmt.Errorf("sandbox %s is %s", sb.ID, sb.State)
		}
		select {
		case <-ctx.Done():
			return sb, ctx.Err()
		case <-time.After(time.Millisecond):
		}
		var err error
		if sb, err = c.get(ctx, sb.ID); err != nil {
			return sb, err
		}
	}
	return sb, nil
}

// terminateAndWait terminates sb and waits until it is terminated.
func (c *client) terminateAndWait(ctx context.Context, sb sandboxDoc) error {
	if err := c.terminate(ctx, sb); err != nil {
		return err
	}
	return c.waitState(ctx, sb.ID, "terminated")
}

// waitState polls the sandbox every millisecond until it is in state.
func (c *client) waitState(ctx context.Context, id, state string) error {
	for {
		sb, err := c.get(ctx, id)
		if err != nil {
			return err
		}
		if sb.State == state {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

func (c *client) get(ctx context.Context, id string) (sandboxDoc, error) {
	var sb sandboxDoc
	err := c.do(ctx, http.MethodGet, "/v1/sandboxes/"+id, nil, http.StatusOK, &sb)
	return sb, err
}

func (c *client) list(ctx context.Context) (int, error) {
	var l struct {
		Sandboxes []json.RawMessage `json:"sandboxes"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/sandboxes", nil, http.StatusOK, &l)
	return len(l.Sandboxes), err
}

func (c *client) terminate(ctx context.Context, sb sandboxDoc) error {
	return c.do(ctx, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/actions/terminate",
		map[string]any{"expectedGeneration": sb.Generation}, http.StatusOK, nil)
}

// execResult is the part of a command result the bench checks.
type execResult struct {
	ExitCode *int   `json:"exitCode"`
	Stdout   string `json:"stdout"`
}

func (c *client) exec(ctx context.Context, sb sandboxDoc, argv ...string) (execResult, error) {
	var res execResult
	err := c.do(ctx, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/commands",
		map[string]any{"expectedGeneration": sb.Generation, "argv": argv}, http.StatusOK, &res)
	if err == nil && (res.ExitCode == nil || *res.ExitCode != 0) {
		err = fmt.Errorf("%q did not exit 0: %v", argv, res.ExitCode)
	}
	return res, err
}

func (c *client) writeFile(ctx context.Context, sb sandboxDoc, path string, data []byte) error {
	return c.do(ctx, http.MethodPut, "/v1/sandboxes/"+sb.ID+"/files/content", map[string]any{
		"expectedGeneration": sb.Generation, "path": path, "contentBase64": base64.StdEncoding.EncodeToString(data),
	}, http.StatusOK, nil)
}

func (c *client) readFile(ctx context.Context, sb sandboxDoc, path string) ([]byte, error) {
	var res struct {
		ContentBase64 string `json:"contentBase64"`
	}
	q := url.Values{"path": {path}, "expectedGeneration": {strconv.FormatInt(sb.Generation, 10)}}
	if err := c.do(ctx, http.MethodGet, "/v1/sandboxes/"+sb.ID+"/files/content?"+q.Encode(), nil, http.StatusOK, &res); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(res.ContentBase64)
}

// lastCursor is the newest cursor of the sandbox's events, 0 when it has none.
func (c *client) lastCursor(ctx context.Context, id string) (int64, error) {
	var after int64
	for {
		var page struct {
			Events []struct {
				Cursor int64 `json:"cursor"`
			} `json:"events"`
		}
		q := url.Values{"after": {strconv.FormatInt(after, 10)}, "sandboxId": {id}}
		if err := c.do(ctx, http.MethodGet, "/v1/events?"+q.Encode(), nil, http.StatusOK, &page); err != nil {
			return 0, err
		}
		if len(page.Events) == 0 {
			return after, nil
		}
		after = page.Events[len(page.Events)-1].Cursor
	}
}
