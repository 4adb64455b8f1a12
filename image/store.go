// Package image is sandboxd's content-addressed store of OCI images: pulled from a registry
// (go-containerregistry's distribution client, credentials from the config.json keychain), imported
// from an OCI layout or a `docker save` / oci-archive tarball, each layer unpacked once, in overlayfs's
// format, into a directory of its own that every sandbox of the image stacks as a lower layer.
//
// Main invariant: what the store's directory holds under layers/ and images/ is complete and verified.
// A layer is unpacked into tmp/ and renamed into layers/ only once its diffID matches the image's
// config; an image's record is written (renamed into images/) only once each of its layers is in
// layers/; a name points at a recorded image only. Whatever a crash leaves half-made is under tmp/,
// which Open clears. A sandbox that uses an image holds it (Acquire, recorded in users/), and an image
// held is never removed.
package image

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/sandboxd/sandbox"
)

// hostArch is the architecture of the images the store takes from an index.
const hostArch = runtime.GOARCH

// DefaultMaxLayerBytes bounds the unpacked size of one layer unless Config says otherwise.
const DefaultMaxLayerBytes = 64 << 30

// Config configures a Store. Dir is required.
type Config struct {
	Dir string
	// Insecure names the registries (host or host:port) reached over plain HTTP; every other one is
	// reached over HTTPS only.
	Insecure []string
	// Keychain finds registry credentials; default authn.DefaultKeychain (the config.json of
	// $DOCKER_CONFIG or ~/.docker, and its credential helpers).
	Keychain authn.Keychain
	// MaxLayerBytes bounds the files of one layer, unpacked; default DefaultMaxLayerBytes.
	MaxLayerBytes int64
}

// Image is an image in the store, ready to be stacked.
type Image struct {
	Digest string   // the manifest's digest, sha256:…
	Layers []string // the unpacked layers' directories, bottom first
	Config v1.Config
}

// record is what images/<hex>.json says of an image.
type record struct {
	Digest  string          `json:"digest"`
	DiffIDs []string        `json:"diffIds"`
	Config  json.RawMessage `json:"config"` // the image's config file, as its manifest names it
	// Snapshot is where a snapshot was taken; nil for a pulled or imported image.
	Snapshot *Origin `json:"snapshot,omitempty"`
}

// Store is the image store. It is safe for concurrent use, and two processes may share its directory.
//
// The names (refs.json) and the image records a Store has read are kept in memory while the
// generation in the lock file stays what it was when they were read: every change of either moves
// the generation on, under the lock, before it touches a file (changing), so a Store on the same
// directory, in this process or another, reads them again at its next look under the lock.
type Store struct {
	cfg Config

	mu    sync.Mutex               // guards pulls and the metadata under dir, with the lock file
	lock  *os.File                 // flock'd while mu is held: a second process's changes wait
	gen   uint64                   // under mu: the lock file's generation, read when mu was taken
	cache *cache                   // under mu: what the names and records said at gen; nil when unknown
	pulls map[string]*pull         // pulls in flight, by image digest or name
	layer map[string]chan struct{} // layers being unpacked, by diffID
	// inflight counts, by the hex of a diffID, the adds that want the layer and have not recorded
	// their image yet: Prune leaves it alone.
	inflight map[string]int

	closeOnce sync.Once
	closeErr  error
}

// cache is what refs.json and the image records said at generation gen.
type cache struct {
	gen    uint64
	refs   map[string]string // nil until read
	images map[string]Image  // by digest
}

// pull is a fetch of one image in flight, which every concurrent caller waits for.
type pull struct {
	done chan struct{}
	img  Image
	err  error
}

// Open opens (making it if needed) the store at cfg.Dir and reconciles it: what a crash left in tmp/
// is removed, and an image whose layer is missing is forgotten.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("image: Dir is required")
	}
	if cfg.Keychain == nil {
		cfg.Keychain = authn.DefaultKeychain
	}
	if cfg.MaxLayerBytes <= 0 {
		cfg.MaxLayerBytes = DefaultMaxLayerBytes
	}
	// The layers are read by the sandboxes' runtime, an unprivileged host uid, through the overlay:
	// searchable by others, readable by nobody but root.
	for _, d := range []string{"", "layers", "images", "users", "tmp"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o711); err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
	}
	lock, err := os.OpenFile(filepath.Join(cfg.Dir, "lock"), os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	s := &Store{cfg: cfg, lock: lock, pulls: map[string]*pull{}, layer: map[string]chan struct{}{}, inflight: map[string]int{}}
	s.lockAll()
	defer s.unlockAll()
	if err := s.reconcile(); err != nil {
		lock.Close()
		return nil, fmt.Errorf("image: reconcile %s: %w", cfg.Dir, err)
	}
	return s, nil
}

// Close releases the store's lock file; a second Close is a no-op.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.lock.Close() })
	return s.closeErr
}

func (s *Store) lockAll() {
	s.mu.Lock()
	for syscall.Flock(int(s.lock.Fd()), syscall.LOCK_EX) == syscall.EINTR {
	}
	gen, err := s.generation()
	if err != nil || s.cache != nil && s.cache.gen != gen {
		s.cache = nil // another Store changed the names or the records, or none can tell
	}
	if err == nil {
		s.gen = gen
	}
	if s.cache == nil && err == nil {
		s.cache = &cache{gen: gen, images: map[string]Image{}}
	}
}

// generation reads the lock file's generation: how many changes of the names and records the
// directory has seen (0 for a lock file that has none yet). Called with the lock.
func (s *Store) generation() (uint64, error) {
	var b [8]byte
	n, err := s.lock.ReadAt(b[:], 0)
	if n == 0 && err == io.EOF {
		return 0, nil
	}
	if n < len(b) {
		return 0, fmt.Errorf("image: the store's generation: %d bytes: %v", n, err)
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// changing moves the lock file's generation on and forgets what this Store read: called with the
// lock, before any change of refs.json, templates.json or an image record, so that every Store on
// the directory reads them again (a process killed after it leaves them read again too).
func (s *Store) changing() error {
	s.cache = nil
	gen, err := s.generation()
	if err != nil {
		return err
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], gen+1)
	if _, err := s.lock.WriteAt(b[:], 0); err != nil {
		return fmt.Errorf("image: the store's generation: %w", err)
	}
	s.gen = gen + 1
	return nil
}

// writeMeta replaces the metadata file at path (refs.json, templates.json, an image record) with v,
// once the generation has moved on.
func (s *Store) writeMeta(path string, v any) error {
	if err := s.changing(); err != nil {
		return err
	}
	return writeFileAtomic(path, v)
}

// removeRecord removes the record of digest, once the generation has moved on. A record that is not
// there is no error.
func (s *Store) removeRecord(digest string) error {
	if err := s.changing(); err != nil {
		return err
	}
	if err := os.Remove(s.recordPath(digest)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

func (s *Store) unlockAll() {
	syscall.Flock(int(s.lock.Fd()), syscall.LOCK_UN)
	s.mu.Unlock()
}

func (s *Store) tmpDir() string { return filepath.Join(s.cfg.Dir, "tmp") }
func (s *Store) layerDir(diffID string) string {
	return filepath.Join(s.cfg.Dir, "layers", hexOf(diffID))
}
func (s *Store) recordPath(digest string) string {
	return filepath.Join(s.cfg.Dir, "images", hexOf(digest)+".json")
}
func (s *Store) usersDir(digest string) string {
	return filepath.Join(s.cfg.Dir, "users", hexOf(digest))
}
func (s *Store) refsPath() string      { return filepath.Join(s.cfg.Dir, "refs.json") }
func (s *Store) templatesPath() string { return filepath.Join(s.cfg.Dir, "templates.json") }

// hexOf is the hex of a sha256 digest, its file name in the store.
func hexOf(digest string) string { return strings.TrimPrefix(digest, "sha256:") }

// validDigest reports whether d is a sha256 digest in canonical form.
func validDigest(d string) bool {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != 64 {
		return false
	}
	for _, c := range h {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// reconcile clears tmp/ and forgets the records whose layers are not all there. Called with the lock.
func (s *Store) reconcile() error {
	ents, err := os.ReadDir(s.tmpDir())
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(s.tmpDir(), e.Name())); err != nil {
			return err
		}
	}
	recs, err := s.records()
	if err != nil {
		return err
	}
	for _, r := range recs {
		for _, d := range r.DiffIDs {
			if _, err := os.Stat(s.layerDir(d)); err != nil {
				if err := s.removeRecord(r.Digest); err != nil {
					return err
				}
				break
			}
		}
	}
	return s.reconcileTemplates()
}

// records reads every image record.
func (s *Store) records() ([]record, error) {
	ents, err := os.ReadDir(filepath.Join(s.cfg.Dir, "images"))
	if err != nil {
		return nil, err
	}
	var out []record
	for _, e := range ents {
		hex, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		r, err := s.readRecord("sha256:" + hex)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (s *Store) readRecord(digest string) (record, error) {
	raw, err := os.ReadFile(s.recordPath(digest))
	if err != nil {
		return record{}, err
	}
	var r record
	if err := json.Unmarshal(raw, &r); err != nil {
		return record{}, fmt.Errorf("image record %s: %w", digest, err)
	}
	return r, nil
}

// refs is the names the store knows, each to its image's digest: a map of the caller's own. Called
// with the lock.
func (s *Store) refs() (map[string]string, error) {
	m, err := s.cachedRefs()
	return maps.Clone(m), err
}

// cachedRefs is the names the store knows, as this Store last read them while the generation stays
// the same: not to be changed.
func (s *Store) cachedRefs() (map[string]string, error) {
	if s.cache != nil && s.cache.refs != nil {
		return s.cache.refs, nil
	}
	m, err := s.readRefs()
	if err == nil && s.cache != nil {
		s.cache.refs = m
	}
	return m, err
}

// readRefs reads refs.json.
func (s *Store) readRefs() (map[string]string, error) {
	raw, err := os.ReadFile(s.refsPath())
	if os.IsNotExist(err) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("image names: %w", err)
	}
	return m, nil
}

func (s *Store) setRef(nameStr, digest string) error {
	m, err := s.refs()
	if err != nil {
		return err
	}
	m[nameStr] = digest
	return s.writeMeta(s.refsPath(), m)
}

func writeFileAtomic(path string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return err
	}
	_, err = f.Write(raw)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// image makes the Image of a record.
func (s *Store) image(r record) (Image, error) {
	var cf v1.ConfigFile
	if err := json.Unmarshal(r.Config, &cf); err != nil {
		return Image{}, fmt.Errorf("image config of %s: %w", r.Digest, err)
	}
	img := Image{Digest: r.Digest, Config: cf.Config}
	for _, d := range r.DiffIDs {
		img.Layers = append(img.Layers, s.layerDir(d))
	}
	return img, nil
}

// local parses a reference without a registry as a name of the store's own: the store knows no
// default registry, so such a name is never fetched.
var local = name.WithDefaultRegistry("")

// Normalize returns ref in the form the store names it by (go-containerregistry's, with the default
// tag), and whether it pins a digest. Errors: ErrInvalidRequest for a reference that does not parse.
func Normalize(ref string) (string, bool, error) {
	r, err := name.ParseReference(ref, local)
	if err != nil {
		return "", false, fmt.Errorf("image %q: %v: %w", ref, err, sandbox.ErrInvalidRequest)
	}
	_, pinned := r.(name.Digest)
	return r.Name(), pinned, nil
}

// AtDigest is the reference to ref's repository at digest (registry/repository@sha256:…), which a pull
// fetches exactly that image by, and whether ref names a registry to fetch it from at all.
// Errors: ErrInvalidRequest for a reference that does not parse.
func AtDigest(ref, digest string) (string, bool, error) {
	r, err := name.ParseReference(ref, local)
	if err != nil {
		return "", false, fmt.Errorf("image %q: %v: %w", ref, err, sandbox.ErrInvalidRequest)
	}
	return r.Context().Name() + "@" + digest, r.Context().RegistryStr() != "", nil
}

// Lookup returns the stored image ref names (a name the store was given, or an image digest, bare or
// as name@sha256:…). Errors: ErrNotFound when the store holds no such image, ErrInvalidRequest for a
// reference that does not parse.
func (s *Store) Lookup(ref string) (Image, error) {
	s.lockAll()
	defer s.unlockAll()
	return s.lookupLocked(ref)
}

func (s *Store) lookupLocked(ref string) (Image, error) {
	digest, err := s.resolveLocked(ref)
	if err != nil {
		return Image{}, err
	}
	if img, ok := s.cachedImage(digest); ok {
		return img, nil
	}
	r, err := s.readRecord(digest)
	if os.IsNotExist(err) {
		return Image{}, fmt.Errorf("image %s: %w", ref, sandbox.ErrNotFound)
	}
	if err != nil {
		return Image{}, err
	}
	img, err := s.image(r)
	if err == nil && s.cache != nil {
		s.cache.images[digest] = img
	}
	return copyImage(img), err
}

// cachedImage is the image of the record of digest as this Store read it at the present generation,
// if it has.
func (s *Store) cachedImage(digest string) (Image, bool) {
	if s.cache == nil {
		return Image{}, false
	}
	img, ok := s.cache.images[digest]
	return copyImage(img), ok
}

// copyImage is img with slices of its own, which its caller may change without changing the cache's.
func copyImage(img Image) Image {
	img.Layers = slices.Clone(img.Layers)
	c := &img.Config
	c.Env, c.Cmd, c.Entrypoint, c.Shell = slices.Clone(c.Env), slices.Clone(c.Cmd), slices.Clone(c.Entrypoint), slices.Clone(c.Shell)
	c.Labels = maps.Clone(c.Labels)
	return img
}

// resolveLocked is the digest ref names in the store, without looking it up.
func (s *Store) resolveLocked(ref string) (string, error) {
	if validDigest(ref) {
		return ref, nil
	}
	r, err := name.ParseReference(ref, local)
	if err != nil {
		return "", fmt.Errorf("image %q: %v: %w", ref, err, sandbox.ErrInvalidRequest)
	}
	if d, ok := r.(name.Digest); ok {
		return d.DigestStr(), nil
	}
	refs, err := s.cachedRefs()
	if err != nil {
		return "", err
	}
	d, ok := refs[r.Name()]
	if !ok {
		return "", fmt.Errorf("image %s: %w", ref, sandbox.ErrNotFound)
	}
	return d, nil
}

// Ensure returns the image ref names, pulling it when the store does not hold it. A name the store
// holds is not pulled again: every sandbox of it runs the bytes first pulled, until the name is
// pulled anew (Pull). Errors: as Pull.
func (s *Store) Ensure(ctx context.Context, ref string) (Image, error) {
	img, err := s.Lookup(ref)
	if !errors.Is(err, sandbox.ErrNotFound) {
		return img, err
	}
	return s.Pull(ctx, ref, nil)
}

// Pull fetches ref from its registry, unpacks the layers the store lacks and names the image ref.
// Concurrent pulls of one reference are one fetch. progress, when not nil, is told how far it has come.
// Errors: ErrInvalidRequest for a reference that does not parse, ErrNotFound when the registry has no
// such image, ErrProviderUnavailable when it cannot be reached or its answer is unusable.
func (s *Store) Pull(ctx context.Context, ref string, progress func(Progress)) (Image, error) {
	r, err := s.parse(ref)
	if err != nil {
		return Image{}, err
	}
	return s.once(r.Name(), func() (Image, error) {
		opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(s.cfg.Keychain),
			remote.WithPlatform(hostPlatform())}
		if !s.insecure(r) {
			opts = append(opts, remote.WithTransport(httpsOnly{remote.DefaultTransport}))
		}
		img, err := remote.Image(r, opts...)
		if err != nil {
			return Image{}, classifyRemote(ref, err)
		}
		out, err := s.add(ctx, img, progress, true)
		if err != nil {
			return Image{}, classifyRemote(ref, err)
		}
		if err := s.name(r.Name(), out.Digest); err != nil {
			return Image{}, err
		}
		return out, nil
	})
}

// parse parses ref, reached over plain HTTP when its registry is one the store was told is insecure.
func (s *Store) parse(ref string) (name.Reference, error) {
	r, err := name.ParseReference(ref, local)
	if err != nil {
		return nil, fmt.Errorf("image %q: %v: %w", ref, err, sandbox.ErrInvalidRequest)
	}
	if r.Context().RegistryStr() == "" {
		return nil, fmt.Errorf("image %q names no registry to pull it from (registry/repository:tag): %w", ref, sandbox.ErrInvalidRequest)
	}
	if s.insecure(r) {
		r, err = name.ParseReference(ref, local, name.Insecure)
		if err != nil {
			return nil, fmt.Errorf("image %q: %v: %w", ref, err, sandbox.ErrInvalidRequest)
		}
	}
	return r, nil
}

// insecure reports whether r's registry is one the store may reach over plain HTTP.
func (s *Store) insecure(r name.Reference) bool {
	return slices.Contains(s.cfg.Insecure, r.Context().RegistryStr())
}

// httpsOnly refuses every request but an HTTPS one. go-containerregistry speaks plain HTTP to a
// registry on a loopback or private address by itself; the store does so only to those it is told of.
type httpsOnly struct{ next http.RoundTripper }

func (t httpsOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" {
		return nil, fmt.Errorf("%s: plain HTTP to a registry not named insecure", req.URL.Host)
	}
	return t.next.RoundTrip(req)
}

// once runs fetch for key unless one runs already, whose result it then shares.
func (s *Store) once(key string, fetch func() (Image, error)) (Image, error) {
	s.mu.Lock()
	if p, ok := s.pulls[key]; ok {
		s.mu.Unlock()
		<-p.done
		return p.img, p.err
	}
	p := &pull{done: make(chan struct{})}
	s.pulls[key] = p
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pulls, key)
		s.mu.Unlock()
		close(p.done)
	}()
	p.img, p.err = fetch()
	return p.img, p.err
}

// name points nameStr at the recorded image digest.
func (s *Store) name(nameStr, digest string) error {
	s.lockAll()
	defer s.unlockAll()
	if _, err := os.Stat(s.recordPath(digest)); err != nil {
		return fmt.Errorf("name %s: %w", nameStr, err)
	}
	return s.setRef(nameStr, digest)
}

// add unpacks the layers of img the store lacks and records img. Its config must be the blob its
// manifest names, and each layer's unpacked bytes the config's diffID.
// progress, when not nil, is told how far it has come; countBytes counts the layers' compressed bytes
// read (tracker).
func (s *Store) add(ctx context.Context, img v1.Image, progress func(Progress), countBytes bool) (Image, error) {
	digest, err := img.Digest()
	if err != nil {
		return Image{}, fmt.Errorf("manifest: %w", err)
	}
	m, err := img.Manifest()
	if err != nil {
		return Image{}, fmt.Errorf("manifest: %w", err)
	}
	rawCfg, err := img.RawConfigFile()
	if err != nil {
		return Image{}, fmt.Errorf("config: %w", err)
	}
	if h, _, err := v1.SHA256(strings.NewReader(string(rawCfg))); err != nil || h != m.Config.Digest {
		return Image{}, fmt.Errorf("config is not the blob %s its manifest names", m.Config.Digest)
	}
	var cf v1.ConfigFile
	if err := json.Unmarshal(rawCfg, &cf); err != nil {
		return Image{}, fmt.Errorf("config: %w", err)
	}
	if cf.OS != "" && cf.OS != "linux" {
		return Image{}, fmt.Errorf("an image for %s, not linux", cf.OS)
	}
	layers, err := img.Layers()
	if err != nil {
		return Image{}, fmt.Errorf("layers: %w", err)
	}
	if len(layers) != len(cf.RootFS.DiffIDs) {
		return Image{}, fmt.Errorf("%d layers, %d diffIDs in the config", len(layers), len(cf.RootFS.DiffIDs))
	}
	rec := record{Digest: digest.String(), Config: rawCfg}
	s.mu.Lock()
	for _, d := range cf.RootFS.DiffIDs {
		s.inflight[d.Hex]++
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		for _, d := range cf.RootFS.DiffIDs {
			if s.inflight[d.Hex]--; s.inflight[d.Hex] <= 0 {
				delete(s.inflight, d.Hex)
			}
		}
		s.mu.Unlock()
	}()
	if len(m.Layers) != len(layers) {
		return Image{}, fmt.Errorf("%d layers, %d in the manifest", len(layers), len(m.Layers))
	}
	track := newTracker(progress, m, countBytes)
	for i, l := range layers {
		diffID := cf.RootFS.DiffIDs[i].String()
		if !validDigest(diffID) {
			return Image{}, fmt.Errorf("layer %d: diffID %q is no sha256 digest", i, diffID)
		}
		if err := s.unpack(ctx, track.wrap(i, l), diffID); err != nil {
			return Image{}, fmt.Errorf("layer %s: %w", diffID, err)
		}
		rec.DiffIDs = append(rec.DiffIDs, diffID)
		track.done(i)
	}
	s.lockAll()
	defer s.unlockAll()
	for _, d := range rec.DiffIDs {
		if _, err := os.Stat(s.layerDir(d)); err != nil {
			return Image{}, fmt.Errorf("layer %s went away meanwhile: %w", d, err)
		}
	}
	if err := s.writeMeta(s.recordPath(rec.Digest), rec); err != nil {
		return Image{}, err
	}
	return s.image(rec)
}

// unpack unpacks l into layers/ unless it is there, once however many callers want it.
func (s *Store) unpack(ctx context.Context, l v1.Layer, diffID string) error {
	for {
		if _, err := os.Stat(s.layerDir(diffID)); err == nil {
			return nil
		}
		s.mu.Lock()
		busy, ok := s.layer[diffID]
		if !ok {
			busy = make(chan struct{})
			s.layer[diffID] = busy
		}
		s.mu.Unlock()
		if ok {
			select {
			case <-busy:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		err := s.unpackNew(l, diffID)
		s.mu.Lock()
		delete(s.layer, diffID)
		s.mu.Unlock()
		close(busy)
		return err
	}
}

func (s *Store) unpackNew(l v1.Layer, diffID string) error {
	tmp, err := os.MkdirTemp(s.tmpDir(), "layer-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	root := filepath.Join(tmp, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return err
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return err
	}
	got, err := unpackLayer(root, rc, s.cfg.MaxLayerBytes)
	if cerr := rc.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if got != diffID {
		return fmt.Errorf("unpacked bytes are %s, the config says %s", got, diffID)
	}
	if err := syncTree(root); err != nil {
		return err
	}
	s.lockAll()
	defer s.unlockAll()
	err = os.Rename(root, s.layerDir(diffID))
	if errors.Is(err, os.ErrExist) || errors.Is(err, syscall.ENOTEMPTY) {
		return nil // another process unpacked it meanwhile
	}
	return err
}

// syncTree flushes the file system dir is on, so that a layer renamed into place survives a crash
// whole.
func syncTree(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// classifyRemote gives a fetch's error its class: no such image, or a registry that cannot serve it.
func classifyRemote(ref string, err error) error {
	if errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrInvalidRequest) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var te *transport.Error
	if errors.As(err, &te) && (te.StatusCode == http.StatusNotFound || slices.ContainsFunc(te.Errors, func(d transport.Diagnostic) bool {
		return d.Code == transport.ManifestUnknownErrorCode || d.Code == transport.NameUnknownErrorCode
	})) {
		return fmt.Errorf("image %s: %v: %w", ref, err, sandbox.ErrNotFound)
	}
	return fmt.Errorf("image %s: %v: %w", ref, err, sandbox.ErrProviderUnavailable)
}
