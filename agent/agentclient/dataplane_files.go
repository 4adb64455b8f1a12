package agentclient

import (
	"context"
	"fmt"
	"io"

	"github.com/sandboxd/sandbox"
)

// The DataPlane's streamed files: each call finds the sandbox's agent and streams through it, for as
// long as ctx lets it (a stream has no CallTimeout; the agent must begin it within streamStart).

var _ sandbox.FileStreamer = DataPlane{}

// PutFile writes a file from body.
func (d DataPlane) PutFile(ctx context.Context, ref sandbox.Ref, put sandbox.FilePut, body io.Reader) (sandbox.FileWritten, error) {
	c, err := d.Agents.Agent(ctx, ref)
	if err != nil {
		return sandbox.FileWritten{}, err
	}
	fw, err := c.PutFile(ctx, put, body)
	if err != nil {
		return sandbox.FileWritten{}, fmt.Errorf("write in %s: %w", ref, err)
	}
	return fw, nil
}

// UploadState says how much of an upload's partial the sandbox holds.
func (d DataPlane) UploadState(ctx context.Context, ref sandbox.Ref, path, upload string) (fw sandbox.FileWritten, err error) {
	err = d.withAgent(ctx, ref, "upload state", 0, func(ctx context.Context, c *Client) (err error) {
		fw, err = c.UploadState(ctx, path, upload)
		return err
	})
	return fw, err
}

// GetFile opens a raw read.
func (d DataPlane) GetFile(ctx context.Context, ref sandbox.Ref, path string, rng *sandbox.FileRange, wantDigest bool) (*sandbox.FileRead, error) {
	c, err := d.Agents.Agent(ctx, ref)
	if err != nil {
		return nil, err
	}
	rd, err := c.GetFile(ctx, path, rng, wantDigest)
	if err != nil {
		return nil, fmt.Errorf("read in %s: %w", ref, err)
	}
	return rd, nil
}

// PutArchive extracts a tar stream into dir.
func (d DataPlane) PutArchive(ctx context.Context, ref sandbox.Ref, dir string, body io.Reader) (sandbox.ArchiveWritten, error) {
	c, err := d.Agents.Agent(ctx, ref)
	if err != nil {
		return sandbox.ArchiveWritten{}, err
	}
	aw, err := c.PutArchive(ctx, dir, body)
	if err != nil {
		return aw, fmt.Errorf("archive into %s: %w", ref, err)
	}
	return aw, nil
}

// GetArchive opens the tar stream of dir.
func (d DataPlane) GetArchive(ctx context.Context, ref sandbox.Ref, dir string) (io.ReadCloser, error) {
	c, err := d.Agents.Agent(ctx, ref)
	if err != nil {
		return nil, err
	}
	rc, err := c.GetArchive(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("archive of %s: %w", ref, err)
	}
	return rc, nil
}

// WatchFiles opens a watch of dir.
func (d DataPlane) WatchFiles(ctx context.Context, ref sandbox.Ref, dir string, recursive bool) (sandbox.FileWatch, error) {
	c, err := d.Agents.Agent(ctx, ref)
	if err != nil {
		return nil, err
	}
	w, err := c.Watch(ctx, dir, recursive)
	if err != nil {
		return nil, fmt.Errorf("watch in %s: %w", ref, err)
	}
	return w, nil
}
