package client

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"strconv"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

// Exec runs cmd in generation gen of a ready sandbox and returns how it ended. A zero cmd.Timeout or
// cmd.MaxOutputBytes means the server's default. A command that ran, whatever its exit code, timeout or
// cancellation, is a result, not an error; a program that cannot start has exit code 127. It is never
// retried. Errors: ErrInvalidRequest, ErrNotFound, ErrGenerationConflict, ErrInvalidState,
// ErrUnsupportedCapability, ErrProviderUnavailable.
func (c *Client) Exec(ctx context.Context, id sandbox.ID, gen sandbox.Generation, cmd sandbox.Command) (*sandbox.CommandResult, error) {
	req := api.CommandRequest{ExpectedGeneration: gen, Argv: cmd.Argv, Cwd: cmd.Cwd, Env: cmd.Env}
	if cmd.Timeout != 0 {
		s := cmd.Timeout.Seconds()
		req.TimeoutSeconds = &s
	}
	if cmd.MaxOutputBytes != 0 {
		req.MaxOutputBytes = &cmd.MaxOutputBytes
	}
	var res commandResult
	if err := c.do(ctx, call{method: "POST", path: sandboxPath(id) + "/commands", body: req}, &res); err != nil {
		return nil, err
	}
	return &res.CommandResult, nil
}

// fileContent is an api.FileContent that decodes itself.
type fileContent struct {
	api.FileContent
}

func genQuery(gen sandbox.Generation, path string) url.Values {
	return url.Values{"path": {path}, "expectedGeneration": {strconv.FormatInt(int64(gen), 10)}}
}

// ReadFile returns the content of the file at path in generation gen (at most sandbox.MaxFileBytes).
// Errors: ErrNotFound (sandbox or file), ErrInvalidRequest (a directory), ErrGenerationConflict,
// ErrInvalidState, ErrUnsupportedCapability, ErrProviderUnavailable.
func (c *Client) ReadFile(ctx context.Context, id sandbox.ID, gen sandbox.Generation, path string) ([]byte, error) {
	var fc fileContent
	k := call{method: "GET", path: sandboxPath(id) + "/files/content", query: genQuery(gen, path), safe: true}
	if err := c.do(ctx, k, &fc); err != nil {
		return nil, err
	}
	data, err := base64.StdEncoding.DecodeString(fc.ContentBase64)
	if err != nil {
		return nil, fmt.Errorf("read %s: content is not base64: %w", path, sandbox.ErrProviderProtocol)
	}
	return data, nil
}

// WriteFile replaces the file at path in generation gen with data, creating parent directories, and
// returns the number of bytes written. Errors: ErrInvalidRequest, ErrRequestTooLarge, ErrNotFound,
// ErrGenerationConflict, ErrInvalidState, ErrUnsupportedCapability, ErrProviderUnavailable.
func (c *Client) WriteFile(ctx context.Context, id sandbox.ID, gen sandbox.Generation, path string, data []byte) (int64, error) {
	req := api.FileWriteRequest{ExpectedGeneration: gen, Path: path, ContentBase64: base64.StdEncoding.EncodeToString(data)}
	var fc fileContent
	if err := c.do(ctx, call{method: "PUT", path: sandboxPath(id) + "/files/content", body: req}, &fc); err != nil {
		return 0, err
	}
	return fc.Size, nil
}

// ListFiles lists one directory of generation gen; an empty path is the working directory. Each entry's
// Path can be passed back to ReadFile or ListFiles. Errors as ReadFile, with ErrInvalidRequest for a file.
func (c *Client) ListFiles(ctx context.Context, id sandbox.ID, gen sandbox.Generation, path string) ([]sandbox.FileEntry, error) {
	if path == "" {
		path = "."
	}
	var out api.FileList
	k := call{method: "GET", path: sandboxPath(id) + "/files/entries", query: genQuery(gen, path), safe: true}
	if err := c.do(ctx, k, &out); err != nil {
		return nil, err
	}
	return out.Entries, nil
}
