package client

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"
)

func TestHashedBody(t *testing.T) {
	data := make([]byte, 5<<20+7)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	sum := sha256.Sum256(data)
	want := formatDigest(sum[:])
	var last int64
	progress := func(n int64) { last = n }

	// Through WriteTo (net/http's chunked body) and through Read in small pieces.
	for _, read := range []func(b *hashedBody) ([]byte, error){
		func(b *hashedBody) ([]byte, error) {
			var out bytes.Buffer
			_, err := b.WriteTo(&out)
			return out.Bytes(), err
		},
		func(b *hashedBody) ([]byte, error) { return io.ReadAll(iotest.HalfReader(b)) },
	} {
		b := newHashedBody(iotest.HalfReader(bytes.NewReader(data)), -1, sha256.New(), 10, progress)
		got, err := read(b)
		b.wait()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("sent %d bytes of %d: %v", len(got), len(data), err)
		}
		if b.trailer.Get("Repr-Digest") != want || last != int64(len(data))+10 {
			t.Fatalf("trailer %q, want %q; progress %d", b.trailer.Get("Repr-Digest"), want, last)
		}
	}

	// A source shorter than the size said is an error, not a shorter file, and sets no trailer.
	b := newHashedBody(bytes.NewReader(data[:100]), 200, sha256.New(), 0, nil)
	if _, err := io.ReadAll(b); !errors.Is(err, io.ErrUnexpectedEOF) || b.trailer.Get("Repr-Digest") != "" {
		t.Fatalf("a short source: %v, trailer %q", err, b.trailer.Get("Repr-Digest"))
	}
	b.wait()
	// One longer is cut at the size.
	b = newHashedBody(bytes.NewReader(data), 100, sha256.New(), 0, nil)
	got, err := io.ReadAll(b)
	short := sha256.Sum256(data[:100])
	if err != nil || !bytes.Equal(got, data[:100]) || b.trailer.Get("Repr-Digest") != formatDigest(short[:]) {
		t.Fatalf("a long source: %d bytes, %v", len(got), err)
	}

	// Closed while it reads ahead of the send: never an end that looks whole.
	b = newHashedBody(iotest.HalfReader(bytes.NewReader(data)), -1, sha256.New(), 0, nil)
	buf := make([]byte, 64<<10)
	if _, err := b.Read(buf); err != nil {
		t.Fatal(err)
	}
	b.Close()
	var rerr error
	for rerr == nil {
		_, rerr = b.Read(buf)
	}
	if !errors.Is(rerr, errBodyClosed) || b.trailer.Get("Repr-Digest") != "" {
		t.Fatalf("reads after Close end with %v, trailer %q", rerr, b.trailer.Get("Repr-Digest"))
	}
	b.wait()

	// Closed while its source blocks: a read ends at once, and the reader once the source returns.
	pr, pw := io.Pipe()
	b = newHashedBody(pr, -1, sha256.New(), 0, nil)
	b.Close()
	if _, err := b.Read(make([]byte, 10)); !errors.Is(err, errBodyClosed) {
		t.Fatalf("read after Close: %v", err)
	}
	pw.CloseWithError(errors.New("gone"))
	b.wait()
}
