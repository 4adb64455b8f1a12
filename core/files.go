package core

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/sandboxd/sandbox"
)

// Streamed files (sandbox.FileStreamer): each call is checked as every file call is (dataPlane),
// runs for as long as its caller's context (a transfer has no provider timeout: its bytes pace it),
// and holds the sandbox in use until its stream is closed. A raw write records the contract's
// sandbox.file_written event, as the contract's write does.

func (r *Runtime) streamer() (sandbox.FileStreamer, error) {
	fs, ok := r.prov.(sandbox.FileStreamer)
	if !ok {
		return nil, fmt.Errorf("provider cannot stream files: %w", sandbox.ErrUnsupportedCapability)
	}
	return fs, nil
}

// streamStart checks a streamed call and finds its provider.
func (r *Runtime) streamStart(ctx context.Context, id sandbox.ID, gen sandbox.Generation, op, p string) (sandbox.Ref, sandbox.FileStreamer, error) {
	if err := checkPath(p); err != nil {
		return sandbox.Ref{}, nil, err
	}
	ref, err := r.dataPlane(ctx, id, gen, op, sandbox.CapFileAccess)
	if err != nil {
		return sandbox.Ref{}, nil, err
	}
	fs, err := r.streamer()
	return ref, fs, err
}

// streamCall runs fn, turning a panic or an unclassified error into ErrProviderUnavailable, and
// schedules a reconcile when the provider failed.
func (r *Runtime) streamCall(ref sandbox.Ref, op string, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("provider panicked", "op", op, "panic", p)
			err = fmt.Errorf("provider %s panicked: %w", op, sandbox.ErrProviderUnavailable)
		}
		if err != nil {
			r.providerTrouble(ref, err)
		}
	}()
	err = fn()
	if err == nil || sandbox.ClassOf(err).Err != nil {
		return err
	}
	return fmt.Errorf("provider %s: %v: %w", op, err, sandbox.ErrProviderUnavailable)
}

// PutFile writes a file of a ready sandbox from body, atomically, and records the write as an event.
//
// Errors: those of WriteFile; ErrRequestTooLarge when the sandbox's disk is full; ErrInvalidRequest
// for a digest that does not match or a body that broke off (an upload's partial is kept);
// ErrInvalidState for an offset past an upload's partial.
func (r *Runtime) PutFile(ctx context.Context, id sandbox.ID, gen sandbox.Generation, put sandbox.FilePut, body io.Reader) (sandbox.FileWritten, error) {
	defer r.Active(id)()
	ref, fs, err := r.streamStart(ctx, id, gen, "write file", put.Path)
	if err != nil {
		return sandbox.FileWritten{}, err
	}
	var fw sandbox.FileWritten
	err = r.streamCall(ref, "write file", func() (err error) {
		fw, err = fs.PutFile(ctx, ref, put, body)
		return err
	})
	if err != nil {
		return sandbox.FileWritten{}, err
	}
	r.appendEvents(context.WithoutCancel(ctx), sandbox.NewEvent(sandbox.EventFileWritten, ref, r.now(),
		sandbox.FileWrittenData{Path: put.Path, Size: fw.Size}))
	return fw, nil
}

// UploadState says how many bytes an upload's partial holds (0: none).
func (r *Runtime) UploadState(ctx context.Context, id sandbox.ID, gen sandbox.Generation, p, upload string) (sandbox.FileWritten, error) {
	if !sandbox.UploadIDValid(upload) {
		return sandbox.FileWritten{}, fmt.Errorf("upload %.80q: want 8 to 64 of [A-Za-z0-9_-]: %w", upload, sandbox.ErrInvalidRequest)
	}
	ref, fs, err := r.streamStart(ctx, id, gen, "upload state", p)
	if err != nil {
		return sandbox.FileWritten{}, err
	}
	var fw sandbox.FileWritten
	err = r.streamCall(ref, "upload state", func() (err error) {
		fw, err = fs.UploadState(ctx, ref, p, upload)
		return err
	})
	return fw, err
}

// GetFile opens a file of a ready sandbox for a raw read; the caller closes it.
//
// Errors: those of ReadFile, without its size limit.
func (r *Runtime) GetFile(ctx context.Context, id sandbox.ID, gen sandbox.Generation, p string, rng *sandbox.FileRange, wantDigest bool) (*sandbox.FileRead, error) {
	done := r.Active(id)
	ref, fs, err := r.streamStart(ctx, id, gen, "read file", p)
	if err != nil {
		done()
		return nil, err
	}
	var rd *sandbox.FileRead
	err = r.streamCall(ref, "read file", func() (err error) {
		rd, err = fs.GetFile(ctx, ref, p, rng, wantDigest)
		return err
	})
	if err != nil {
		done()
		return nil, err
	}
	rd.ReadCloser = &inUse{ReadCloser: rd.ReadCloser, done: done}
	return rd, nil
}

// PutArchive extracts a tar stream into a directory of a ready sandbox.
//
// Errors: those of PutFile.
func (r *Runtime) PutArchive(ctx context.Context, id sandbox.ID, gen sandbox.Generation, dir string, body io.Reader) (sandbox.ArchiveWritten, error) {
	defer r.Active(id)()
	ref, fs, err := r.streamStart(ctx, id, gen, "write archive", dir)
	if err != nil {
		return sandbox.ArchiveWritten{}, err
	}
	var aw sandbox.ArchiveWritten
	err = r.streamCall(ref, "write archive", func() (err error) {
		aw, err = fs.PutArchive(ctx, ref, dir, body)
		return err
	})
	return aw, err
}

// GetArchive opens the tar stream of a directory of a ready sandbox; the caller closes it.
func (r *Runtime) GetArchive(ctx context.Context, id sandbox.ID, gen sandbox.Generation, dir string) (io.ReadCloser, error) {
	done := r.Active(id)
	ref, fs, err := r.streamStart(ctx, id, gen, "read archive", dir)
	if err != nil {
		done()
		return nil, err
	}
	var rc io.ReadCloser
	err = r.streamCall(ref, "read archive", func() (err error) {
		rc, err = fs.GetArchive(ctx, ref, dir)
		return err
	})
	if err != nil {
		done()
		return nil, err
	}
	return &inUse{ReadCloser: rc, done: done}, nil
}

// WatchFiles opens a watch of a directory of a ready sandbox; the caller closes it.
//
// Errors: those of ListFiles; ErrInvalidState past sandbox.MaxWatches open on the sandbox.
func (r *Runtime) WatchFiles(ctx context.Context, id sandbox.ID, gen sandbox.Generation, dir string, recursive bool) (sandbox.FileWatch, error) {
	done := r.Active(id)
	ref, fs, err := r.streamStart(ctx, id, gen, "watch files", dir)
	if err != nil {
		done()
		return nil, err
	}
	var w sandbox.FileWatch
	err = r.streamCall(ref, "watch files", func() (err error) {
		w, err = fs.WatchFiles(ctx, ref, dir, recursive)
		return err
	})
	if err != nil {
		done()
		return nil, err
	}
	return &watchInUse{FileWatch: w, done: done}, nil
}

// inUse ends a sandbox's use when its stream is closed.
type inUse struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (u *inUse) Close() error {
	err := u.ReadCloser.Close()
	u.once.Do(u.done)
	return err
}

type watchInUse struct {
	sandbox.FileWatch
	once sync.Once
	done func()
}

// Hold passes a pause on to the provider's watch (sandbox.WatchHolder), when it bounds its silence.
func (w *watchInUse) Hold(paused bool) {
	if h, ok := w.FileWatch.(sandbox.WatchHolder); ok {
		h.Hold(paused)
	}
}

func (w *watchInUse) Close() error {
	err := w.FileWatch.Close()
	w.once.Do(w.done)
	return err
}
