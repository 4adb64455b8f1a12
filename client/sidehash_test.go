package client

import (
	"bytes"
	"crypto/sha256"
	"math/rand/v2"
	"testing"
)

// A sideHash's sum is SHA-256 of what was written, in order, whatever the sizes of the writes; it
// drops what comes after its sum.
func TestSideHash(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, total := range []int{0, 1, 1 << 20, 1<<20 + 1, 9<<20 + 12345} {
		data := make([]byte, total)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		s := newSideHash(sha256.New())
		for p := data; len(p) > 0; {
			k := min(len(p), 1+rng.IntN(3<<20))
			if n, err := s.Write(p[:k]); n != k || err != nil {
				t.Fatalf("write of %d: %d, %v", k, n, err)
			}
			p = p[k:]
		}
		want := sha256.Sum256(data)
		if got := s.Sum(); !bytes.Equal(got, want[:]) {
			t.Fatalf("%d bytes: sum %x, want %x", total, got, want)
		}
		s.Write([]byte("after"))
		if got := s.Sum(); !bytes.Equal(got, want[:]) {
			t.Fatalf("%d bytes: sum after a late write %x, want %x", total, got, want)
		}
	}
}
