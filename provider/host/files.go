package host

import (
	"context"
	"io"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/fsroot"
)

// Streamed files, in the daemon's process: the agent's own code (agent.Files) on the sandbox's
// directory as a confined root.

var _ sandbox.FileStreamer = (*Provider)(nil)

// PutFile writes path inside the sandbox from body, atomically. Errors as agent.Files.PutFile.
func (p *Provider) PutFile(ctx context.Context, ref sandbox.Ref, put sandbox.FilePut, body io.Reader) (fw sandbox.FileWritten, err error) {
	err = p.withRoot(ref, func(r *fsroot.Root) (err error) {
		fw, err = p.files.PutFile(r, put, ctxReader{ctx, body})
		return err
	})
	return fw, err
}

// UploadState says how much of an upload's partial the sandbox holds.
func (p *Provider) UploadState(_ context.Context, ref sandbox.Ref, path, upload string) (fw sandbox.FileWritten, err error) {
	err = p.withRoot(ref, func(r *fsroot.Root) (err error) {
		fw, err = p.files.UploadState(r, path, upload)
		return err
	})
	return fw, err
}

// GetFile opens path inside the sandbox for a raw read.
func (p *Provider) GetFile(_ context.Context, ref sandbox.Ref, path string, rng *sandbox.FileRange, wantDigest bool) (rd *sandbox.FileRead, err error) {
	err = p.withRoot(ref, func(r *fsroot.Root) (err error) {
		rd, err = p.files.GetFile(r, path, rng, wantDigest)
		return err
	})
	return rd, err
}

// PutArchive extracts a tar stream into dir inside the sandbox.
func (p *Provider) PutArchive(ctx context.Context, ref sandbox.Ref, dir string, body io.Reader) (aw sandbox.ArchiveWritten, err error) {
	err = p.withRoot(ref, func(r *fsroot.Root) (err error) {
		aw, err = p.files.PutArchive(r, dir, ctxReader{ctx, body})
		return err
	})
	return aw, err
}

// GetArchive opens the tar stream of dir inside the sandbox. The directory is checked before it
// returns; the stream is written as it is read.
func (p *Provider) GetArchive(ctx context.Context, ref sandbox.Ref, dir string) (io.ReadCloser, error) {
	dirPath, err := p.live(ref)
	if err != nil {
		return nil, err
	}
	root, err := fsroot.Open(dirPath, "/")
	if err != nil {
		return nil, err
	}
	rt, err := root.OpenRoot(dir)
	if err != nil {
		root.Close()
		return nil, err
	}
	rt.Close()
	pr, pw := io.Pipe()
	go func() {
		defer root.Close()
		pw.CloseWithError(p.files.GetArchive(root, dir, pw))
	}()
	return pr, nil
}

// WatchFiles watches dir inside the sandbox; at most sandbox.MaxWatches at once per generation.
func (p *Provider) WatchFiles(ctx context.Context, ref sandbox.Ref, dir string, recursive bool) (w sandbox.FileWatch, err error) {
	err = p.withRoot(ref, func(r *fsroot.Root) error {
		aw, err := p.files.Watch(r, ref.Name(), dir, recursive)
		if err == nil {
			w = aw
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	go func() { // the watch ends with its caller
		select {
		case <-ctx.Done():
			w.Close()
		case <-waitDone(w):
		}
	}()
	return w, nil
}

// waitDone is closed once w's changes are.
func waitDone(w sandbox.FileWatch) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		w.Err()
		close(ch)
	}()
	return ch
}

// ctxReader is a reader that stops when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
