package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

// PullImage fetches ref from its registry into the daemon's image store and returns it once it is
// there. Errors: ErrInvalidRequest, ErrNotFound (no such image), ErrUnsupportedCapability (the
// provider runs no images), ErrProviderUnavailable (the registry cannot be reached).
func (c *Client) PullImage(ctx context.Context, ref string) (*sandbox.ImageInfo, error) {
	var info sandbox.ImageInfo
	err := c.do(ctx, call{method: "POST", path: "/v1/images/pull", body: map[string]string{"reference": ref}, safe: true}, &info)
	if err != nil {
		return nil, err
	}
	return &info, nil
}

// ImportImage adds the image of path on the daemon's host (an OCI layout directory, or a docker-save
// or oci-archive tarball) and names it name. Errors: ErrInvalidRequest, ErrUnsupportedCapability.
func (c *Client) ImportImage(ctx context.Context, path, name string) (*sandbox.ImageInfo, error) {
	var info sandbox.ImageInfo
	err := c.do(ctx, call{method: "POST", path: "/v1/images/import", body: map[string]string{"path": path, "name": name}, safe: true}, &info)
	if err != nil {
		return nil, err
	}
	return &info, nil
}

// PullImageProgress is PullImage that tells fn how far the pull has come, as the daemon reports it
// (at most ten times a second; the last report is the whole image). Errors: as PullImage's; a stream
// that ends without its answer is ErrProviderUnavailable.
func (c *Client) PullImageProgress(ctx context.Context, ref string, fn func(sandbox.ImageProgress)) (*sandbox.ImageInfo, error) {
	return c.imageStream(ctx, call{method: "POST", path: "/v1/images/pull", body: map[string]string{"reference": ref}, safe: true}, fn)
}

// ImportImageProgress is ImportImage that tells fn how far the import has come (the bytes of a
// docker-save tarball's layers are not counted: TotalBytes is 0). Errors: as ImportImage's.
func (c *Client) ImportImageProgress(ctx context.Context, path, name string, fn func(sandbox.ImageProgress)) (*sandbox.ImageInfo, error) {
	return c.imageStream(ctx, call{method: "POST", path: "/v1/images/import", body: map[string]string{"path": path, "name": name}, safe: true}, fn)
}

// imageStream performs a pull or an import as a stream of its progress (api/extensions.yaml,
// pullImage) and returns the image its "done" event carries. A daemon that answers with JSON (an
// error, or one that streams nothing) is read as for PullImage.
func (c *Client) imageStream(ctx context.Context, k call, fn func(sandbox.ImageProgress)) (*sandbox.ImageInfo, error) {
	k.header = http.Header{"Accept": {"text/event-stream"}}
	resp, err := c.send(ctx, k)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		var info sandbox.ImageInfo
		if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
			return nil, fmt.Errorf("%s %s: decoding the response: %w", k.method, k.path, err)
		}
		return &info, nil
	}
	var (
		info *sandbox.ImageInfo
		fail error
	)
	_, _, err = readSSE(bufio.NewReader(resp.Body), func(name, data string) bool {
		switch name {
		case "progress":
			var p sandbox.ImageProgress
			if err := json.Unmarshal([]byte(data), &p); err != nil {
				fail = &protocolError{"a progress event that is not ImageProgress"}
				return false
			}
			if fn != nil {
				fn(p)
			}
		case "done":
			info = new(sandbox.ImageInfo)
			if err := json.Unmarshal([]byte(data), info); err != nil {
				fail = &protocolError{"a done event that is not ImageInfo"}
			}
			return false
		case "error":
			var er api.ErrorResponse
			if err := json.Unmarshal([]byte(data), &er); err != nil || er.Error.Code == "" {
				fail = &protocolError{"an error event that is not an ErrorResponse"}
			} else {
				fail = &Error{Status: resp.StatusCode, Code: er.Error.Code, Message: er.Error.Message}
			}
			return false
		}
		return true
	})
	switch {
	case fail != nil:
		return nil, fail
	case info != nil:
		return info, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		return nil, fmt.Errorf("%s %s: the stream broke: %v: %w", k.method, k.path, err, sandbox.ErrProviderUnavailable)
	}
	return nil, fmt.Errorf("%s %s: the stream ended without its answer: %w", k.method, k.path, sandbox.ErrProviderUnavailable)
}

// Images lists the daemon's images. Errors: ErrUnsupportedCapability.
func (c *Client) Images(ctx context.Context) ([]sandbox.ImageInfo, error) {
	var out struct {
		Images []sandbox.ImageInfo `json:"images"`
	}
	if err := c.do(ctx, call{method: "GET", path: "/v1/images", safe: true}, &out); err != nil {
		return nil, err
	}
	return out.Images, nil
}

// Image returns the image of a manifest digest. Errors: ErrNotFound, ErrUnsupportedCapability.
func (c *Client) Image(ctx context.Context, digest string) (*sandbox.ImageInfo, error) {
	var info sandbox.ImageInfo
	if err := c.do(ctx, call{method: "GET", path: "/v1/images/digest/" + url.PathEscape(digest), safe: true}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// RemoveImage forgets ref: a name that name, a digest the image and all its names. Errors:
// ErrNotFound, ErrInvalidState (a sandbox runs on it), ErrUnsupportedCapability.
func (c *Client) RemoveImage(ctx context.Context, ref string) error {
	return c.do(ctx, call{method: "POST", path: "/v1/images/remove", body: map[string]string{"reference": ref}}, nil)
}

// PruneImages removes the images and layers nothing holds, and says how many layers went.
func (c *Client) PruneImages(ctx context.Context) (int, error) {
	var out struct {
		LayersRemoved int `json:"layersRemoved"`
	}
	if err := c.do(ctx, call{method: "POST", path: "/v1/images/prune", safe: true}, &out); err != nil {
		return 0, err
	}
	return out.LayersRemoved, nil
}
