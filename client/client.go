// Package client is the Go client of the sandboxd HTTP API: one method per operation of the contract,
// typed with the domain's own types and the contract's wire types (package api), plus helpers to wait
// for a state and to follow the event stream.
//
// Its invariants: every error the server answers is an *Error whose Unwrap is the domain sentinel of its
// error.code (never guessed from the status, since 409 has three meanings), so errors.Is(err,
// sandbox.ErrGenerationConflict) works; and a request is retried only when repeating it cannot change
// anything more than the first attempt did: reads, and creates, which always carry a clientRequestId.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
	"github.com/sandboxd/sandbox/internal/fastpath"
)

// DefaultURL is where sandboxd listens unless told otherwise.
const DefaultURL = "http://127.0.0.1:4311"

// Client talks to one sandboxd. It is safe for concurrent use.
type Client struct {
	base       *url.URL
	hc         *http.Client
	token      string
	attempts   int
	minBackoff time.Duration
	maxBackoff time.Duration
	plainJSON  bool // large answers decoded by encoding/json: SANDBOXD_PLAIN lists json (decode.go)
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client send its requests through hc. Do not set hc.Timeout: commands and
// event streams run as long as their context allows.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithToken sends "Authorization: Bearer token" with every request.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithRetry sets how many times a safe request is tried in all (at least 1) and the bounds of the
// exponential backoff between tries. The defaults are 4 tries, 100ms to 2s.
func WithRetry(attempts int, minBackoff, maxBackoff time.Duration) Option {
	return func(c *Client) {
		c.attempts = max(attempts, 1)
		c.minBackoff = max(minBackoff, time.Millisecond)
		c.maxBackoff = max(maxBackoff, c.minBackoff)
	}
}

// New returns a client of the sandboxd at baseURL, e.g. "http://127.0.0.1:4311". An empty baseURL is
// DefaultURL. It returns an error wrapping sandbox.ErrInvalidRequest when baseURL is not an http(s) URL.
// When the environment's SANDBOXD_PLAIN lists json, the client decodes every answer with encoding/json
// (docs/design/json-parser.md).
func New(baseURL string, opts ...Option) (*Client, error) {
	if baseURL == "" {
		baseURL = DefaultURL
	}
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("base URL %q: want http://host:port: %w", baseURL, sandbox.ErrInvalidRequest)
	}
	c := &Client{base: u, hc: http.DefaultClient, attempts: 4, minBackoff: 100 * time.Millisecond, maxBackoff: 2 * time.Second,
		plainJSON: fastpath.FromEnv()[fastpath.JSON]}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// BaseURL is the URL the client talks to.
func (c *Client) BaseURL() string { return c.base.String() }

// Error is an error the server answered with an ErrorResponse. Unwrap returns the domain sentinel of
// Code (nil for "internal" or a code this client does not know).
type Error struct {
	Status  int               // the HTTP status (200 for an error a stream carried as its last event)
	Code    sandbox.ErrorCode // error.code
	Message string            // error.message
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Unwrap makes errors.Is(err, sandbox.ErrNotFound) and the like work.
func (e *Error) Unwrap() error { return sandbox.ErrorForCode(e.Code) }

// decodeError turns a non-2xx response into an *Error. A body that is not an ErrorResponse (a proxy's
// page, say) becomes an internal error carrying the status.
func decodeError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var er api.ErrorResponse
	if err := json.Unmarshal(body, &er); err != nil || er.Error.Code == "" {
		msg := strings.TrimSpace(string(body))
		if msg == "" {
			msg = resp.Status
		}
		return &Error{Status: resp.StatusCode, Code: sandbox.CodeInternal, Message: msg}
	}
	return &Error{Status: resp.StatusCode, Code: er.Error.Code, Message: er.Error.Message}
}

// call is one API request.
type call struct {
	method string
	path   string
	query  url.Values
	header http.Header
	body   any  // marshalled to JSON when not nil
	safe   bool // may be retried
}

// newRequest builds the HTTP request of k.
func (c *Client) newRequest(ctx context.Context, k call, body []byte) (*http.Request, error) {
	u := *c.base
	u.Path = c.base.Path + k.path
	u.RawQuery = k.query.Encode()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, k.method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	for h, vs := range k.header {
		req.Header[h] = vs
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json")
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// send performs k and returns the 2xx response, whose body the caller closes. A safe call is retried
// on transport errors and on 500, 502 and 503, with bounded exponential backoff.
func (c *Client) send(ctx context.Context, k call) (*http.Response, error) {
	var body []byte
	if k.body != nil {
		b, err := json.Marshal(k.body)
		if err != nil {
			return nil, fmt.Errorf("encode %s %s: %w", k.method, k.path, sandbox.ErrInvalidRequest)
		}
		body = b
	}
	attempts := 1
	if k.safe {
		attempts = c.attempts
	}
	var last error
	for i := range attempts {
		if i > 0 {
			if err := sleep(ctx, c.backoff(i)); err != nil {
				return nil, last
			}
		}
		req, err := c.newRequest(ctx, k, body)
		if err != nil {
			return nil, err
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			last = fmt.Errorf("%s %s: %w", k.method, k.path, err)
			continue
		}
		if resp.StatusCode/100 == 2 {
			return resp, nil
		}
		last = decodeError(resp)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable:
			continue
		}
		return nil, last
	}
	return nil, last
}

// do performs k and decodes the response body into out, when out is not nil.
func (c *Client) do(ctx context.Context, k call, out any) error {
	resp, err := c.send(ctx, k)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if bd, ok := out.(bodyDecoder); ok && !c.plainJSON {
		body, err := io.ReadAll(resp.Body)
		if err == nil {
			err = bd.decodeBody(body)
		}
		if err != nil {
			return fmt.Errorf("%s %s: decoding the response: %w", k.method, k.path, err)
		}
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decoding the response: %w", k.method, k.path, err)
	}
	return nil
}

// backoff is the wait before try i (1-based retries): doubling from minBackoff, capped at maxBackoff,
// with up to a quarter of jitter so that clients retrying together spread out.
func (c *Client) backoff(i int) time.Duration {
	d := c.minBackoff << min(i-1, 20)
	if d > c.maxBackoff || d <= 0 {
		d = c.maxBackoff
	}
	return d - time.Duration(rand.Int64N(int64(d)/4+1))
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
