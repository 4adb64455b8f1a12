package oci_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/httpapi/apitest"
	"github.com/sandboxd/sandbox/image/imagetest"
	"github.com/sandboxd/sandbox/internal/testenv"
	teststack "github.com/sandboxd/sandbox/internal/testenv/stack"
)

// holdingProxy stands before a registry and, for each GET of a blob it was told to hold, sends the
// first 4 MiB, says so on waiting, then waits for the test: release lets the rest follow, cut cuts the
// connection and every later fetch of that blob.
type holdingProxy struct {
	host    string
	mu      sync.Mutex
	hold    map[string]*heldBlob
	waiting chan string // a held blob's digest, once its first 4 MiB are sent
}

type heldBlob struct {
	decide chan bool // true: release, false: cut
	cut    bool
}

func startHoldingProxy(t *testing.T, registry string) *holdingProxy {
	t.Helper()
	p := &holdingProxy{hold: map[string]*heldBlob{}, waiting: make(chan string, 4)}
	p.host = imagetest.Proxy(t, registry, func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		p.mu.Lock()
		var held *heldBlob
		digest := ""
		for d, h := range p.hold {
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/blobs/"+d) {
				held, digest = h, d
			}
		}
		cut := held != nil && held.cut
		p.mu.Unlock()
		if held == nil {
			next.ServeHTTP(w, r)
			return
		}
		if cut {
			panic(http.ErrAbortHandler)
		}
		resp, err := http.Get("http://" + registry + r.URL.Path)
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Length", resp.Header.Get("Content-Length"))
		w.WriteHeader(resp.StatusCode)
		io.CopyN(w, resp.Body, 4<<20)
		w.(http.Flusher).Flush()
		p.waiting <- digest
		if !<-held.decide {
			p.mu.Lock()
			held.cut = true
			p.mu.Unlock()
			panic(http.ErrAbortHandler)
		}
		io.Copy(w, resp.Body)
	})
	return p
}

// holdBlob makes the proxy hold the blob of layer l; the returned channel decides.
func (p *holdingProxy) holdBlob(t *testing.T, l v1.Layer) chan bool {
	t.Helper()
	h := &heldBlob{decide: make(chan bool, 1)}
	p.mu.Lock()
	p.hold[mustDigest(t, l)] = h
	p.mu.Unlock()
	return h.decide
}

// midBigLayer reports whether p is a report from inside bigImage's big layer, 2 MiB into it: the
// proxy is then holding it.
func midBigLayer(t *testing.T, p sandbox.ImageProgress) bool {
	bb, err := imagetest.BusyboxLayer(t).Size()
	if err != nil {
		t.Fatal(err)
	}
	return p.Layers == 1 && p.Bytes >= bb+2<<20
}

// bigImage is busybox and a layer of 8 MiB of random bytes (compressed, about as large).
func bigImage(t *testing.T) (v1.Image, v1.Layer) {
	t.Helper()
	big, err := random.Layer(8<<20, "application/vnd.oci.image.layer.v1.tar+gzip")
	if err != nil {
		t.Fatal(err)
	}
	return imagetest.Image(t, v1.Config{}, imagetest.BusyboxLayer(t), big), big
}

// TestImagePullProgress: a pull and an import asked for as a stream report their progress while they
// run (the registry holds the big layer's second half until the client has seen the first counted),
// end with the image, or with an error event when the registry dies mid-stream (nothing is named
// then); an unknown image is an ordinary 404 before any stream; a client that goes away cancels the
// pull and leaves no goroutine behind.
func TestImagePullProgress(t *testing.T) {
	reg := imagetest.StartRegistry(t)
	proxy := startHoldingProxy(t, reg.Host)
	cfg := testConfig(t, testenv.StateDir(t))
	cfg.Runtime = "runc"
	cfg.InsecureRegistries = []string{proxy.host}
	st := teststack.New(t, newProviderWith(t, cfg))
	c, err := client.New(st.URL, client.WithHTTPClient(&http.Client{Transport: apitest.Transport(t, http.DefaultTransport)}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	viaProxy := func(ref string) string { return strings.Replace(ref, reg.Host, proxy.host, 1) }

	t.Run("the stream reports while the pull runs", func(t *testing.T) {
		img, big := bigImage(t)
		tagged, _ := reg.Push(t, "progress/ok:1", img)
		decide := proxy.holdBlob(t, big)
		var steps []sandbox.ImageProgress
		released := false
		info, err := c.PullImageProgress(ctx, viaProxy(tagged), func(p sandbox.ImageProgress) {
			steps = append(steps, p)
			if !released && midBigLayer(t, p) {
				<-proxy.waiting
				released = true
				decide <- true // seen while the layer is held: let the rest come
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := img.Digest()
		if info.Digest != want.String() || info.Layers != 2 {
			t.Fatalf("pulled %+v, pushed %s", info, want)
		}
		if !released {
			t.Fatalf("no report while the big layer was held: %+v", steps)
		}
		last := steps[len(steps)-1]
		if last.Layers != 2 || last.TotalLayers != 2 || last.Bytes != last.TotalBytes || last.TotalBytes < 8<<20 {
			t.Fatalf("last report %+v of %+v", last, steps)
		}
		for i := 1; i < len(steps); i++ {
			if steps[i].Bytes < steps[i-1].Bytes || steps[i].Layers < steps[i-1].Layers {
				t.Fatalf("reports go back: %+v", steps)
			}
		}
	})

	t.Run("a registry that dies mid-stream is an error event, and nothing is named", func(t *testing.T) {
		img, big := bigImage(t)
		tagged, _ := reg.Push(t, "progress/cut:1", img)
		decide := proxy.holdBlob(t, big)
		reports, cut := 0, false
		_, err := c.PullImageProgress(ctx, viaProxy(tagged), func(p sandbox.ImageProgress) {
			reports++
			if !cut && midBigLayer(t, p) {
				<-proxy.waiting
				cut = true
				decide <- false
			}
		})
		if !errors.Is(err, sandbox.ErrProviderUnavailable) || !cut {
			t.Fatalf("pull cut mid-layer: %v after %d reports, want provider_unavailable in the stream", err, reports)
		}
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != sandbox.CodeProviderUnavailable {
			t.Fatalf("error %#v", err)
		}
		list, err := c.Images(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range list {
			if slices.Contains(im.Names, viaProxy(tagged)) {
				t.Fatalf("after a cut pull the store names it: %+v", im)
			}
		}
	})

	t.Run("an unknown image is an ordinary answer", func(t *testing.T) {
		_, err := c.PullImageProgress(ctx, proxy.host+"/no/such:1", func(sandbox.ImageProgress) {
			t.Error("a report for an image that does not exist")
		})
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != http.StatusNotFound {
			t.Fatalf("unknown image: %#v", err)
		}
	})

	t.Run("a client that goes away cancels the pull", func(t *testing.T) {
		img, big := bigImage(t)
		tagged, _ := reg.Push(t, "progress/gone:1", img)
		decide := proxy.holdBlob(t, big)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		gone := false
		_, err := c.PullImageProgress(cctx, viaProxy(tagged), func(p sandbox.ImageProgress) {
			if !gone && midBigLayer(t, p) {
				<-proxy.waiting
				gone = true
				cancel()
			}
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("pull whose client went away: %v", err)
		}
		decide <- true
		proxy.mu.Lock()
		delete(proxy.hold, mustDigest(t, big))
		proxy.mu.Unlock()
		// The next pull finds nothing half-made and is whole.
		if info, err := c.PullImageProgress(ctx, viaProxy(tagged), nil); err != nil || info.Layers != 2 {
			t.Fatalf("pull after a cancelled one: %+v, %v", info, err)
		}
	})

	t.Run("an import reports its layers, and a layout's bytes", func(t *testing.T) {
		img := imagetest.BusyboxImage(t, "imported")
		dir := t.TempDir()
		lp, err := layout.Write(dir, empty.Index)
		if err != nil {
			t.Fatal(err)
		}
		if err := lp.AppendImage(img); err != nil {
			t.Fatal(err)
		}
		var steps []sandbox.ImageProgress
		record := func(p sandbox.ImageProgress) { steps = append(steps, p) }
		if _, err := c.ImportImageProgress(ctx, dir, "local/layout:1", record); err != nil {
			t.Fatal(err)
		}
		if last := steps[len(steps)-1]; last.Layers != 2 || last.TotalBytes == 0 || last.Bytes != last.TotalBytes {
			t.Fatalf("layout import reports %+v", steps)
		}
		saved := filepath.Join(t.TempDir(), "saved.tar")
		tag, _ := name.NewTag("local/saved:1", name.WithDefaultRegistry(""))
		if err := tarball.WriteToFile(saved, tag, imagetest.BusyboxImage(t, "saved")); err != nil {
			t.Fatal(err)
		}
		steps = nil
		if _, err := c.ImportImageProgress(ctx, saved, "local/saved:1", record); err != nil {
			t.Fatal(err)
		}
		if last := steps[len(steps)-1]; last.Layers != 2 || last.TotalLayers != 2 || last.TotalBytes != 0 {
			t.Fatalf("docker-save import reports %+v", steps)
		}
	})
}

func mustDigest(t *testing.T, l v1.Layer) string {
	t.Helper()
	d, err := l.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}
