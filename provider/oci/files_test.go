package oci_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/testenv/filetest"
)

// TestFiles runs the suite of streamed files over runc containers, through their agents.
func TestFiles(t *testing.T) {
	filetest.Run(t, func(t *testing.T) sandbox.Provider { return newProvider(t) }, killAgent)
}

// pattern is an endless stream of a repeating pseudo-random block, read without holding a file.
type pattern struct {
	block []byte
	off   int
}

func (p *pattern) Read(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k := copy(b[n:], p.block[p.off:])
		n += k
		p.off = (p.off + k) % len(p.block)
	}
	return n, nil
}

type hashWriter struct{ h hash.Hash }

func (w hashWriter) Write(p []byte) (int, error) { return w.h.Write(p) }

// TestFiles2GiB sends a file of 2 GiB in and out of a sandbox whose disk holds it, the digest checked
// each way, and removes it. The upload is written behind and the download read behind
// (agent/pagecache.go): the sandbox's memory cgroup, of 512 MiB, never holds more than a small part
// of the file's page cache.
func TestFiles2GiB(t *testing.T) {
	if testing.Short() {
		t.Skip("2 GiB each way")
	}
	testenv.NoLeaks(t)
	const size = 2 << 30
	p := newProvider(t)
	e := filetest.New(t, p, sandbox.Spec{Resources: &sandbox.Resources{DiskMiB: 2300, MemoryMiB: 512}})
	ctx := context.Background()
	src := &pattern{block: filetest.Random(1<<20+7, 9)}
	sent := sha256.New()
	res, err := e.C.Upload(ctx, e.SB.ID, e.SB.Generation, "big.bin", io.TeeReader(io.LimitReader(src, size), sent),
		client.UploadOptions{Size: size})
	if err != nil {
		t.Fatal(err)
	}
	if res.Size != size {
		t.Fatalf("wrote %d bytes", res.Size)
	}
	checkPeak := func(during string) {
		t.Helper()
		u, err := p.Usage(ctx, sandbox.Ref{ID: e.SB.ID, Generation: e.SB.Generation})
		if err != nil {
			t.Fatal(err)
		}
		// On gVisor the sandbox's memory is its kernel's, which keeps file pages of its own.
		if peak := deref(u.MemoryPeakBytes); !onGVisor(t, p) && peak > 256<<20 {
			t.Errorf("the sandbox's memory peaked at %d MiB by the end of the %s, want at most 256 MiB (about a window of the file's page cache)", peak>>20, during)
		} else {
			t.Logf("the sandbox's memory peaked at %d MiB by the end of the %s", peak>>20, during)
		}
	}
	checkPeak("upload")
	got := hashWriter{sha256.New()}
	d, err := e.C.Download(ctx, e.SB.ID, e.SB.Generation, "big.bin", got, client.DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Size != size || !bytes.Equal(d.Digest, sent.Sum(nil)) || !bytes.Equal(got.h.Sum(nil), sent.Sum(nil)) {
		t.Fatalf("read %d bytes, digest %x, sent %x", d.Size, d.Digest, sent.Sum(nil))
	}
	checkPeak("download")
	e.Sh("rm big.bin")
}

// TestFilesDiskFull: a sandbox whose disk (diskMiB) cannot hold a file refuses it with 413
// request_too_large and keeps the old file; the space the partial took is freed.
func TestFilesDiskFull(t *testing.T) {
	testenv.NoLeaks(t)
	e := filetest.New(t, newProvider(t), sandbox.Spec{Resources: &sandbox.Resources{DiskMiB: 16}})
	ctx := context.Background()
	e.Put("keep.txt", []byte("old"))
	src := io.LimitReader(&pattern{block: filetest.Random(4096, 1)}, 64<<20)
	_, err := e.C.Upload(ctx, e.SB.ID, e.SB.Generation, "keep.txt", src, client.UploadOptions{Size: 64 << 20})
	var apiErr *client.Error
	if !errors.Is(err, sandbox.ErrRequestTooLarge) || !errors.As(err, &apiErr) || apiErr.Status != 413 || !strings.Contains(err.Error(), "disk is full") {
		t.Fatalf("past the disk: %v", err)
	}
	if got, err := e.Get("keep.txt"); err != nil || string(got) != "old" {
		t.Fatalf("the old file: %q %v", got, err)
	}
	// The space is free again: a file of most of the disk fits.
	e.Put("fits.bin", filetest.Random(8<<20, 2))
}
