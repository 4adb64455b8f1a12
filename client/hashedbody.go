package client

import (
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"sync"
)

// uploadBufs are the buffers of hashedBody.
var uploadBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// hashedDepth is the number of buffers in a hashedBody's pipeline.
const hashedDepth = 4

// errBodyClosed ends a hashedBody read after its request was given up.
var errBodyClosed = errors.New("the upload's body was closed")

// hashedBody is the body of an upload whose digest is not known up front. It sends src and hashes
// it beside the send, in a pipeline of pooled buffers: one goroutine fills a buffer from src, a
// second hashes the one before, and the transport's writer sends the one before that; so on two
// cores the hash does not slow the copy. At the end it puts the digest in its trailer's Repr-Digest.
// With want >= 0, a src that ends before want bytes is an error, never a shorter file.
type hashedBody struct {
	h        hash.Hash
	trailer  http.Header
	progress func(int64)
	n        int64 // bytes sent, from the upload's offset

	bufs   [hashedDepth]*[]byte
	free   chan []byte   // buffers nobody holds
	toSend chan []byte   // hashed buffers in order; closed after the last
	stop   chan struct{} // closed by Close
	closed sync.Once
	ended  chan struct{} // closed once the reader and the hasher have ended
	rerr   error         // src's failure; read once toSend is closed
	cur    []byte        // Read's rest of the buffer being sent
	held   []byte        // Read's buffer being sent, whole
	done   bool
}

func newHashedBody(src io.Reader, want int64, h hash.Hash, offset int64, progress func(int64)) *hashedBody {
	b := &hashedBody{h: h, trailer: http.Header{"Repr-Digest": nil}, progress: progress, n: offset,
		free: make(chan []byte, hashedDepth), toSend: make(chan []byte, hashedDepth),
		stop: make(chan struct{}), ended: make(chan struct{})}
	for i := range b.bufs {
		b.bufs[i] = uploadBufs.Get().(*[]byte)
		b.free <- *b.bufs[i]
	}
	// Every channel holds all the buffers: no stage ever blocks on a send.
	toHash := make(chan []byte, hashedDepth)
	if want >= 0 {
		src = io.LimitReader(src, want)
	}
	go func() {
		defer close(toHash)
		var got int64
		for {
			var buf []byte
			select {
			case buf = <-b.free:
			case <-b.stop:
				b.rerr = errBodyClosed // never an end that looks whole
				return
			}
			m, err := io.ReadFull(src, buf)
			got += int64(m)
			if m > 0 {
				toHash <- buf[:m]
			}
			switch {
			case (err == io.EOF || err == io.ErrUnexpectedEOF) && want >= 0 && got < want:
				b.rerr = fmt.Errorf("the source ended after %d bytes of %d: %w", got, want, io.ErrUnexpectedEOF)
				return
			case err == io.EOF || err == io.ErrUnexpectedEOF:
				return
			case err != nil:
				b.rerr = err
				return
			}
		}
	}()
	go func() {
		defer close(b.ended)
		defer close(b.toSend)
		for buf := range toHash {
			h.Write(buf)
			b.toSend <- buf
		}
	}()
	return b
}

// next is the next hashed buffer; nil at the end (io.EOF, the trailer set) or on a failure.
func (b *hashedBody) next() ([]byte, error) {
	if b.done {
		return nil, io.EOF
	}
	select {
	case buf, ok := <-b.toSend:
		if ok {
			return buf, nil
		}
	case <-b.stop:
		return nil, errBodyClosed
	}
	if b.rerr != nil {
		return nil, b.rerr
	}
	b.done = true
	b.trailer.Set("Repr-Digest", formatDigest(b.h.Sum(nil)))
	for _, p := range b.bufs { // every stage has ended: the buffers are free
		uploadBufs.Put(p)
	}
	return nil, io.EOF
}

func (b *hashedBody) sent(k int) {
	b.n += int64(k)
	if b.progress != nil && k > 0 {
		b.progress(b.n)
	}
}

// WriteTo sends each buffer whole: a chunk of 1 MiB.
func (b *hashedBody) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for {
		buf, err := b.next()
		if buf == nil {
			if err == io.EOF {
				err = nil
			}
			return n, err
		}
		k, werr := w.Write(buf)
		n += int64(k)
		b.sent(k)
		b.free <- buf[:cap(buf)]
		if werr != nil {
			return n, werr
		}
	}
}

func (b *hashedBody) Read(p []byte) (int, error) {
	if len(b.cur) == 0 {
		if b.held != nil {
			b.free <- b.held
			b.held = nil
		}
		buf, err := b.next()
		if buf == nil {
			return 0, err
		}
		b.cur, b.held = buf, buf[:cap(buf)]
	}
	k := copy(p, b.cur)
	b.cur = b.cur[k:]
	b.sent(k)
	return k, nil
}

// Close stops the reader of src; wait waits for it (and the hasher) to end.
func (b *hashedBody) Close() error {
	b.closed.Do(func() { close(b.stop) })
	return nil
}

func (b *hashedBody) wait() {
	b.Close()
	<-b.ended
}
