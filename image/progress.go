package image

import (
	"io"
	"sync/atomic"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/sandboxd/sandbox"
)

// Progress is how far a pull or an import has come (sandbox.ImageProgress).
type Progress = sandbox.ImageProgress

// progressStep is how many bytes a layer's fetch reads between two reports.
const progressStep = 256 << 10

// tracker reports a pull's or an import's progress: layers done, and the compressed bytes read of
// the layers' total where that is counted (a registry's or a layout's blobs; not a docker-save
// tarball's layers, which are stored uncompressed and whose compressed form the library would make by
// compressing them). A layer the store holds already counts whole when its turn comes.
type tracker struct {
	report   func(Progress)
	sizes    []int64 // the manifest's compressed size of each layer; nil where bytes are not counted
	p        Progress
	layer    atomic.Int64 // bytes read of the layer being fetched
	reported int64
}

func newTracker(report func(Progress), m *v1.Manifest, countBytes bool) *tracker {
	t := &tracker{report: report, p: Progress{TotalLayers: len(m.Layers)}}
	if countBytes {
		for _, l := range m.Layers {
			t.sizes = append(t.sizes, l.Size)
			t.p.TotalBytes += l.Size
		}
	}
	if t.report == nil {
		t.report = func(Progress) {}
	}
	t.report(t.p)
	return t
}

// wrap returns layer i, counting the compressed bytes read from it when bytes are counted.
func (t *tracker) wrap(i int, l v1.Layer) v1.Layer {
	if t.sizes == nil {
		return l
	}
	t.layer.Store(0)
	cl, err := partial.CompressedToLayer(countedLayer{l, t})
	if err != nil {
		return l
	}
	return cl
}

// read is told of n more bytes of the layer being fetched; it reports every progressStep bytes.
func (t *tracker) read(n int) {
	got := t.layer.Add(int64(n))
	if got-t.reported < progressStep {
		return
	}
	t.reported = got
	p := t.p
	p.Bytes += min(got, t.sizes[p.Layers])
	t.report(p)
}

// done is told that layer i is in the store.
func (t *tracker) done(i int) {
	t.p.Layers = i + 1
	if t.sizes != nil {
		t.p.Bytes += t.sizes[i]
	}
	t.reported = 0
	t.report(t.p)
}

// countedLayer is a layer's compressed form (partial.CompressedLayer, and no more: a v1.Layer would be
// taken as it is) whose stream counts what is read of it. partial.CompressedToLayer decompresses it as
// the registry's or the layout's own layer would.
type countedLayer struct {
	l v1.Layer
	t *tracker
}

func (c countedLayer) Digest() (v1.Hash, error)            { return c.l.Digest() }
func (c countedLayer) Size() (int64, error)                { return c.l.Size() }
func (c countedLayer) MediaType() (types.MediaType, error) { return c.l.MediaType() }

func (c countedLayer) Compressed() (io.ReadCloser, error) {
	rc, err := c.l.Compressed()
	if err != nil {
		return nil, err
	}
	return countingReader{rc, c.t}, nil
}

type countingReader struct {
	io.ReadCloser
	t *tracker
}

func (r countingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.t.read(n)
	return n, err
}
