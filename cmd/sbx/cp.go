package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/tarroot"
)

func (a *app) cpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and directories into, out of, or between sandboxes",
		Long: `Copy a file or a whole directory. Either side may be ID:PATH, a path inside a sandbox
(relative to its working directory, or absolute inside it); the other is a local path.
Like cp -r: when DST is an existing directory, SRC is copied into it under its own name.
A file of any size travels as a stream, its SHA-256 checked end to end; an upload resumes from
where a broken connection left it, a download by a range from the byte reached. A directory
travels as one tar stream (symlinks as links). Large transfers show a progress bar on a terminal.
A local path holding a colon can be written ./like:this.`,
		Example: `  sbx cp ./src sbx_abc:src          # upload a directory
  sbx cp sbx_abc:out/report.txt .    # download a file
  sbx cp sbx_abc:data sbx_def:data   # between sandboxes`,
		Args: exactArgs(2, "SRC and DST"),
		RunE: func(_ *cobra.Command, args []string) error {
			src, err := a.side(args[0])
			if err != nil {
				return err
			}
			dst, err := a.side(args[1])
			if err != nil {
				return err
			}
			return a.copy(src, dst)
		},
	}
}

// remoteArg splits "ID:PATH"; a colon after a slash is part of a local path.
func remoteArg(arg string) (sandbox.ID, string, bool) {
	i := strings.IndexByte(arg, ':')
	if i <= 0 || strings.ContainsRune(arg[:i], '/') {
		return "", "", false
	}
	p := arg[i+1:]
	if p == "" {
		p = "."
	}
	return sandbox.ID(arg[:i]), p, true
}

// fileInfo is one file of a copy, relative to the copied root ("" when the root is the file).
type fileInfo struct {
	rel  string
	size int64
}

// side is one end of a copy: a local path or a path in a sandbox.
type side interface {
	root() string
	// stat says whether p exists and is a directory.
	stat(p string) (exists, dir bool, err error)
	// files lists the files under p, recursively, or p itself when it is a file.
	files(p string) ([]fileInfo, error)
	// put writes the file p from r, of size bytes, moving bar on.
	put(p string, r io.Reader, size int64, bar *progress) error
	// archive opens the directory p as a tar stream; extract writes one into the directory p.
	archive(p string) (io.ReadCloser, error)
	extract(p string, r io.Reader) error
	join(p, rel string) string
	base(p string) string
}

func (a *app) side(arg string) (side, error) {
	id, p, ok := remoteArg(arg)
	if !ok {
		return localSide(arg), nil
	}
	gen, err := a.current(id, 0)
	if err != nil {
		return nil, err
	}
	return &remoteSide{a: a, id: id, gen: gen, path: p}, nil
}

// copy copies src's root to dst's root, into it when it is an existing directory.
func (a *app) copy(src, dst side) error {
	exists, dir, err := src.stat(src.root())
	if err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("%s: no such file or directory: %w", src.root(), sandbox.ErrNotFound)
	}
	target := dst.root()
	dexists, ddir, err := dst.stat(target)
	if err != nil {
		return err
	}
	if (dexists && ddir) || (!dexists && strings.HasSuffix(target, "/")) {
		target = dst.join(target, src.base(src.root()))
	} else if dexists && dir {
		return usagef("cannot copy directory %s onto file %s", src.root(), target)
	}
	files, err := src.files(src.root())
	if err != nil {
		return err
	}
	var total int64
	for _, f := range files {
		total += f.size
	}
	bar := a.progress(total)
	defer bar.finish()
	if dir {
		return a.copyDir(src, dst, target, bar)
	}
	return a.copyFile(src, dst, target, total, bar)
}

// copyFile streams one file (see the command's help).
func (a *app) copyFile(src, dst side, target string, size int64, bar *progress) error {
	from := src.root()
	switch s := src.(type) {
	case localSide:
		f, err := os.Open(from)
		if err != nil {
			return err
		}
		defer f.Close()
		return dst.put(target, f, size, bar)
	case *remoteSide:
		if l, ok := dst.(localSide); ok {
			return l.download(s, from, target, bar)
		}
		pr, pw := io.Pipe()
		go func() {
			_, err := a.c.Download(a.ctx, s.id, s.gen, from, pw, client.DownloadOptions{})
			pw.CloseWithError(err)
		}()
		defer pr.Close()
		return dst.put(target, pr, size, bar)
	}
	return nil
}

// copyDir streams a directory as one tar stream.
func (a *app) copyDir(src, dst side, target string, bar *progress) error {
	rc, err := src.archive(src.root())
	if err != nil {
		return err
	}
	defer rc.Close()
	return dst.extract(target, &barReader{r: rc, bar: bar})
}

// barReader moves a bar on by what passes.
type barReader struct {
	r   io.Reader
	bar *progress
}

func (b *barReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.bar.add(int64(n))
	return n, err
}

// localSide is a path on this machine.
type localSide string

func (l localSide) root() string { return string(l) }

func (localSide) stat(p string) (bool, bool, error) {
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	return true, fi.IsDir(), nil
}

func (localSide) files(p string) ([]fileInfo, error) {
	var out []fileInfo
	err := filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil // directories are made by the writes under them; links and devices are skipped
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(p, q)
		if err != nil {
			return err
		}
		if rel == "." {
			rel = ""
		}
		out = append(out, fileInfo{rel: filepath.ToSlash(rel), size: fi.Size()})
		return nil
	})
	return out, err
}

func (localSide) put(p string, r io.Reader, _ int64, bar *progress) error {
	return writeLocal(p, func(w io.Writer) error {
		_, err := io.Copy(w, &barReader{r: r, bar: bar})
		return err
	})
}

// writeLocal writes the file p through a temporary beside it, renamed once write succeeded.
func writeLocal(p string, write func(w io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".sbx-*")
	if err != nil {
		return err
	}
	err = write(tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// download streams the file from of a sandbox to the local file p.
func (l localSide) download(s *remoteSide, from, p string, bar *progress) error {
	return writeLocal(p, func(w io.Writer) error {
		_, err := s.a.c.Download(s.a.ctx, s.id, s.gen, from, w, client.DownloadOptions{Progress: bar.to})
		return err
	})
}

func (localSide) archive(p string) (io.ReadCloser, error) {
	rt, err := os.OpenRoot(p)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		defer rt.Close()
		pw.CloseWithError(tarroot.Write(rt, pw))
	}()
	return pr, nil
}

func (localSide) extract(p string, r io.Reader) error {
	if err := os.MkdirAll(p, 0o755); err != nil {
		return err
	}
	rt, err := os.OpenRoot(p)
	if err != nil {
		return err
	}
	defer rt.Close()
	_, err = tarroot.Extract(rt, r)
	return err
}

func (localSide) join(p, rel string) string {
	if rel == "" {
		return p
	}
	return filepath.Join(p, filepath.FromSlash(rel))
}

func (localSide) base(p string) string { return filepath.Base(p) }

// remoteSide is a path in one generation of a sandbox.
type remoteSide struct {
	a    *app
	id   sandbox.ID
	gen  sandbox.Generation
	path string
}

func (r *remoteSide) root() string { return r.path }

func (r *remoteSide) stat(p string) (bool, bool, error) {
	_, err := r.a.c.ListFiles(r.a.ctx, r.id, r.gen, p)
	switch {
	case err == nil:
		return true, true, nil
	case errors.Is(err, sandbox.ErrInvalidRequest):
		return true, false, nil // a file where a directory was expected
	case errors.Is(err, sandbox.ErrNotFound):
		return false, false, nil
	}
	return false, false, err
}

func (r *remoteSide) files(p string) ([]fileInfo, error) {
	entries, err := r.a.c.ListFiles(r.a.ctx, r.id, r.gen, p)
	if errors.Is(err, sandbox.ErrInvalidRequest) {
		// p is a file: find its size in its directory's listing.
		parent, err := r.a.c.ListFiles(r.a.ctx, r.id, r.gen, path.Dir(p))
		if err != nil {
			return nil, err
		}
		for _, e := range parent {
			if path.Base(e.Path) == path.Base(p) {
				return []fileInfo{{size: e.Size}}, nil
			}
		}
		return []fileInfo{{}}, nil
	}
	if err != nil {
		return nil, err
	}
	var out []fileInfo
	for _, e := range entries {
		name := path.Base(e.Path)
		switch e.Kind {
		case sandbox.KindFile:
			out = append(out, fileInfo{rel: name, size: e.Size})
		case sandbox.KindDirectory:
			sub, err := r.files(path.Join(p, name))
			if err != nil {
				return nil, err
			}
			for _, f := range sub {
				out = append(out, fileInfo{rel: path.Join(name, f.rel), size: f.size})
			}
		}
	}
	return out, nil
}

func (r *remoteSide) put(p string, src io.Reader, size int64, bar *progress) error {
	_, err := r.a.c.Upload(r.a.ctx, r.id, r.gen, p, src, client.UploadOptions{Size: size, Progress: bar.to})
	return err
}

func (r *remoteSide) archive(p string) (io.ReadCloser, error) {
	return r.a.c.DownloadArchive(r.a.ctx, r.id, r.gen, p)
}

func (r *remoteSide) extract(p string, src io.Reader) error {
	_, err := r.a.c.UploadArchive(r.a.ctx, r.id, r.gen, p, src)
	return err
}

func (*remoteSide) join(p, rel string) string {
	if rel == "" {
		return p
	}
	return path.Join(p, rel)
}

func (*remoteSide) base(p string) string { return path.Base(p) }
