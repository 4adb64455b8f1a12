package client

import (
	"hash"
	"sync"
)

// sideHash hashes what is written to it on a goroutine of its own, from copies in buffers of its
// own: an upload whose digest the caller does not know is hashed beside its sending, not in the
// reads of the body it sends. Copying a MiB costs a small part of hashing it.
type sideHash struct {
	h    hash.Hash
	full chan []byte // buffers to hash, in order; closed by close
	free chan []byte // hashed buffers
	done chan struct{}

	mu     sync.Mutex
	cur    []byte // the buffer being filled
	made   int    // buffers taken from sideBufs
	closed bool
}

const sideDepth = 4 // buffers a sideHash fills ahead of its hashing

var sideBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1<<20); return &b }}

func newSideHash(h hash.Hash) *sideHash {
	s := &sideHash{h: h, full: make(chan []byte, sideDepth), free: make(chan []byte, sideDepth), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for b := range s.full {
			s.h.Write(b)
			s.free <- b[:0]
		}
	}()
	return s
}

// Write copies p to be hashed; after Sum it drops p.
func (s *sideHash) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	for len(p) > 0 && !s.closed {
		if s.cur == nil {
			s.cur = s.buffer()
		}
		k := copy(s.cur[len(s.cur):cap(s.cur)], p)
		s.cur = s.cur[:len(s.cur)+k]
		p = p[k:]
		if len(s.cur) == cap(s.cur) {
			s.full <- s.cur // never blocks: full holds every buffer there is
			s.cur = nil
		}
	}
	return n, nil
}

// buffer is a free buffer, a new one while fewer than sideDepth are out, or else the next the
// hashing frees.
func (s *sideHash) buffer() []byte {
	select {
	case b := <-s.free:
		return b
	default:
	}
	if s.made < sideDepth {
		s.made++
		return (*sideBufs.Get().(*[]byte))[:0]
	}
	return <-s.free
}

// Sum ends the hashing (once Sum returns, the goroutine is gone and Write drops what it is given)
// and returns the hash of everything written before.
func (s *sideHash) Sum() []byte {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		if len(s.cur) > 0 {
			s.full <- s.cur
		} else if s.cur != nil {
			s.free <- s.cur
		}
		s.cur = nil
		close(s.full)
	}
	s.mu.Unlock()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		select {
		case b := <-s.free:
			sideBufs.Put(&b)
		default:
			return s.h.Sum(nil)
		}
	}
}
