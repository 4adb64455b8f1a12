package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/sandboxd/sandbox"
)

// A snapshot is an image like any other in the store: the layers of the image a sandbox ran on, one
// more layer made of what the sandbox wrote (its overlay's upper directory), and a config that is the
// base's with that layer's diffID appended. Its digest is its config's (a snapshot has no manifest: it
// is never pushed). A template is a name whose versions are snapshots, in templates.json; the newest
// is the name's.

// Origin is where a snapshot was taken.
type Origin struct {
	Sandbox    string    `json:"sandbox"`
	Generation int64     `json:"generation"`
	Base       string    `json:"base"` // the digest of the image the sandbox ran on
	Created    time.Time `json:"created"`
}

// Capture says what to snapshot: the upper directory of a sandbox on the image Base, its files owned
// by the host ids [IDBase, IDBase+IDSize), and the template Name to make it a version of, if any.
type Capture struct {
	Upper          string
	IDBase, IDSize uint32
	MaxBytes       int64 // bounds the files' sizes, sparse ones in full; default the store's MaxLayerBytes
	Name           string
	// Env (NAME=value, each replacing the base's of that name) and WorkingDir, when set, are the
	// snapshot's config's instead of the base's.
	Env        []string
	WorkingDir string
	Origin     Origin
}

// Snapshot is a snapshot as the store shows it.
type Snapshot struct {
	Digest    string
	Origin    Origin
	Layers    int
	Users     int
	Templates []string // name@version of each template version it is
}

// version is one version of a template in templates.json.
type version struct {
	Version int       `json:"version"`
	Digest  string    `json:"digest"`
	Created time.Time `json:"created"`
}

// Template is a template as the store shows it: its versions, oldest first.
type Template struct {
	Name     string
	Versions []TemplateVersion
}

// TemplateVersion is one version of a template.
type TemplateVersion struct {
	Version int
	Digest  string
	Created time.Time
	Users   int
}

// ValidTemplateName reports whether n can name a template: lower-case letters, digits, '.', '_' and
// '-', starting with a letter or digit, at most 128.
func ValidTemplateName(n string) bool {
	if n == "" || len(n) > 128 {
		return false
	}
	for i, c := range n {
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// ParseTemplateRef splits a template reference: a snapshot digest (sha256:…), or name, name@version,
// name@sha256:…. Errors: ErrInvalidRequest.
func ParseTemplateRef(ref string) (name string, ver int, digest string, err error) {
	if validDigest(ref) {
		return "", 0, ref, nil
	}
	name, pin, pinned := strings.Cut(ref, "@")
	if !ValidTemplateName(name) {
		return "", 0, "", fmt.Errorf("template %q: a name of lower-case letters, digits, '.', '_' and '-', or a snapshot's sha256 digest: %w", ref, sandbox.ErrInvalidRequest)
	}
	switch {
	case !pinned:
	case validDigest(pin):
		digest = pin
	default:
		ver, err = strconv.Atoi(pin)
		if err != nil || ver < 1 || strconv.Itoa(ver) != pin {
			return "", 0, "", fmt.Errorf("template %q: a version is a number from 1 or a sha256 digest: %w", ref, sandbox.ErrInvalidRequest)
		}
	}
	return name, ver, digest, nil
}

// SnapshotOf captures c.Upper into a new layer and records the snapshot of c.Origin.Base with it,
// a version of the template c.Name when that is set. What a crash leaves half-made is in tmp/; the
// layer and the record are renamed in, and the template's version written, under the store's lock.
// Errors: ErrNotFound (no base image), ErrInvalidRequest (a bad name, or ErrCaptureRefused).
func (s *Store) SnapshotOf(ctx context.Context, c Capture) (Snapshot, error) {
	if c.Name != "" && !ValidTemplateName(c.Name) {
		return Snapshot{}, fmt.Errorf("template name %q: %w", c.Name, sandbox.ErrInvalidRequest)
	}
	base, err := s.lockedRecord(c.Origin.Base)
	if err != nil {
		return Snapshot{}, err
	}
	if c.MaxBytes <= 0 || c.MaxBytes > s.cfg.MaxLayerBytes {
		c.MaxBytes = s.cfg.MaxLayerBytes
	}
	tmp, err := os.MkdirTemp(s.tmpDir(), "snapshot-")
	if err != nil {
		return Snapshot{}, err
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	root := filepath.Join(tmp, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return Snapshot{}, err
	}
	// The tar is read back by the unpacker as it is written: the layer is made by the code that
	// makes every other, with its checks, and the diffID is the tar's.
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(capture(pw, c.Upper, c.IDBase, c.IDSize, c.MaxBytes)) }()
	diffID, err := unpackLayer(root, pr, c.MaxBytes)
	pr.CloseWithError(errors.New("unpack stopped"))
	if err != nil {
		if errors.Is(err, ErrCaptureRefused) || errors.Is(err, ErrLayerTooLarge) {
			return Snapshot{}, fmt.Errorf("snapshot: %v: %w", err, sandbox.ErrInvalidRequest)
		}
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	var cf v1.ConfigFile
	if err := json.Unmarshal(base.Config, &cf); err != nil {
		return Snapshot{}, fmt.Errorf("base config: %w", err)
	}
	h, err := v1.NewHash(diffID)
	if err != nil {
		return Snapshot{}, err
	}
	if c.Origin.Created.IsZero() {
		c.Origin.Created = time.Now().UTC()
	}
	cf.RootFS.DiffIDs = append(cf.RootFS.DiffIDs, h)
	for _, kv := range c.Env {
		k, _, _ := strings.Cut(kv, "=")
		i := slices.IndexFunc(cf.Config.Env, func(b string) bool { return strings.HasPrefix(b, k+"=") })
		if i >= 0 {
			cf.Config.Env[i] = kv
		} else {
			cf.Config.Env = append(cf.Config.Env, kv)
		}
	}
	if c.WorkingDir != "" {
		cf.Config.WorkingDir = c.WorkingDir
	}
	cf.Created = v1.Time{Time: c.Origin.Created}
	cf.History = append(cf.History, v1.History{Created: cf.Created, CreatedBy: "sandboxd snapshot of " + c.Origin.Sandbox})
	rawCfg, err := json.Marshal(cf)
	if err != nil {
		return Snapshot{}, err
	}
	digest, _, err := v1.SHA256(strings.NewReader(string(rawCfg)))
	if err != nil {
		return Snapshot{}, err
	}
	rec := record{Digest: digest.String(), DiffIDs: append(slices.Clone(base.DiffIDs), diffID), Config: rawCfg, Snapshot: &c.Origin}
	if err := syncTree(root); err != nil {
		return Snapshot{}, err
	}
	s.lockAll()
	defer s.unlockAll()
	for _, d := range base.DiffIDs {
		if _, err := os.Stat(s.layerDir(d)); err != nil {
			return Snapshot{}, fmt.Errorf("base layer %s went away meanwhile: %w", d, err)
		}
	}
	if err := os.Rename(root, s.layerDir(diffID)); err != nil && !errors.Is(err, os.ErrExist) && !errors.Is(err, syscall.ENOTEMPTY) {
		return Snapshot{}, err
	}
	if err := s.writeMeta(s.recordPath(rec.Digest), rec); err != nil {
		return Snapshot{}, err
	}
	if c.Name != "" {
		if err := s.addVersionLocked(c.Name, rec.Digest, c.Origin.Created); err != nil {
			return Snapshot{}, err
		}
	}
	return s.snapshotLocked(rec)
}

// lockedRecord reads the record of digest under the lock. Errors: ErrNotFound.
func (s *Store) lockedRecord(digest string) (record, error) {
	if !validDigest(digest) {
		return record{}, fmt.Errorf("image %q: %w", digest, sandbox.ErrInvalidRequest)
	}
	s.lockAll()
	defer s.unlockAll()
	r, err := s.readRecord(digest)
	if os.IsNotExist(err) {
		return record{}, fmt.Errorf("image %s: %w", digest, sandbox.ErrNotFound)
	}
	return r, err
}

func (s *Store) templates() (map[string][]version, error) {
	raw, err := os.ReadFile(s.templatesPath())
	if os.IsNotExist(err) {
		return map[string][]version{}, nil
	}
	if err != nil {
		return nil, err
	}
	m := map[string][]version{}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("templates: %w", err)
	}
	return m, nil
}

func (s *Store) addVersionLocked(name, digest string, created time.Time) error {
	m, err := s.templates()
	if err != nil {
		return err
	}
	next := 1
	if vs := m[name]; len(vs) > 0 {
		next = vs[len(vs)-1].Version + 1
	}
	m[name] = append(m[name], version{Version: next, Digest: digest, Created: created})
	return s.writeMeta(s.templatesPath(), m)
}

func (s *Store) snapshotLocked(r record) (Snapshot, error) {
	users, err := s.usersLocked(r.Digest)
	if err != nil {
		return Snapshot{}, err
	}
	m, err := s.templates()
	if err != nil {
		return Snapshot{}, err
	}
	out := Snapshot{Digest: r.Digest, Origin: *r.Snapshot, Layers: len(r.DiffIDs), Users: len(users)}
	for _, n := range slices.Sorted(maps.Keys(m)) {
		for _, v := range m[n] {
			if v.Digest == r.Digest {
				out.Templates = append(out.Templates, n+"@"+strconv.Itoa(v.Version))
			}
		}
	}
	return out, nil
}

// Snapshots lists the snapshots, oldest first.
func (s *Store) Snapshots() ([]Snapshot, error) {
	s.lockAll()
	defer s.unlockAll()
	recs, err := s.records()
	if err != nil {
		return nil, err
	}
	var out []Snapshot
	for _, r := range recs {
		if r.Snapshot == nil {
			continue
		}
		sn, err := s.snapshotLocked(r)
		if err != nil {
			return nil, err
		}
		out = append(out, sn)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Origin.Created.Before(out[j].Origin.Created) })
	return out, nil
}

// GetSnapshot returns the snapshot of digest. Errors: ErrNotFound, ErrInvalidRequest.
func (s *Store) GetSnapshot(digest string) (Snapshot, error) {
	if !validDigest(digest) {
		return Snapshot{}, fmt.Errorf("snapshot %q: not a sha256 digest: %w", digest, sandbox.ErrInvalidRequest)
	}
	s.lockAll()
	defer s.unlockAll()
	r, err := s.readRecord(digest)
	if os.IsNotExist(err) || err == nil && r.Snapshot == nil {
		return Snapshot{}, fmt.Errorf("snapshot %s: %w", digest, sandbox.ErrNotFound)
	}
	if err != nil {
		return Snapshot{}, err
	}
	return s.snapshotLocked(r)
}

// RemoveSnapshot removes the snapshot of digest and the template versions that are it. Its layer
// stays until Prune. Errors: ErrNotFound, ErrInUse (nothing removed) while a sandbox runs on it.
func (s *Store) RemoveSnapshot(digest string) error {
	if _, err := s.GetSnapshot(digest); err != nil {
		return err
	}
	s.lockAll()
	defer s.unlockAll()
	return s.removeDigestsLocked([]string{digest}, func(string, version) bool { return true })
}

// removeDigestsLocked removes the records of digests, and the template versions drop says of
// them, once none is held.
func (s *Store) removeDigestsLocked(digests []string, drop func(string, version) bool) error {
	for _, d := range digests {
		users, err := s.usersLocked(d)
		if err != nil {
			return err
		}
		if len(users) > 0 {
			return fmt.Errorf("snapshot %s: held by %d sandboxes: %w", d, len(users), ErrInUse)
		}
	}
	m, err := s.templates()
	if err != nil {
		return err
	}
	for n, vs := range m {
		vs = slices.DeleteFunc(vs, func(v version) bool { return slices.Contains(digests, v.Digest) && drop(n, v) })
		if len(vs) == 0 {
			delete(m, n)
		} else {
			m[n] = vs
		}
	}
	if err := s.writeMeta(s.templatesPath(), m); err != nil {
		return err
	}
	for _, d := range digests {
		still := false
		for _, vs := range m {
			still = still || slices.ContainsFunc(vs, func(v version) bool { return v.Digest == d })
		}
		if still {
			continue
		}
		if err := s.removeRecord(d); err != nil {
			return err
		}
	}
	return nil
}

// ResolveTemplate returns the snapshot digest a template reference names: a snapshot digest, the
// newest version of a name, name@version or name@sha256:… (one of the name's versions). Errors:
// ErrInvalidRequest, ErrNotFound.
func (s *Store) ResolveTemplate(ref string) (string, error) {
	name, ver, digest, err := ParseTemplateRef(ref)
	if err != nil {
		return "", err
	}
	s.lockAll()
	defer s.unlockAll()
	if name == "" {
		if r, err := s.readRecord(digest); err != nil || r.Snapshot == nil {
			return "", fmt.Errorf("snapshot %s: %w", digest, sandbox.ErrNotFound)
		}
		return digest, nil
	}
	v, err := s.versionLocked(name, ver, digest)
	if err != nil {
		return "", err
	}
	return v.Digest, nil
}

func (s *Store) versionLocked(name string, ver int, digest string) (version, error) {
	m, err := s.templates()
	if err != nil {
		return version{}, err
	}
	vs := m[name]
	for i := len(vs) - 1; i >= 0; i-- {
		if ver == 0 && digest == "" || vs[i].Version == ver || vs[i].Digest == digest {
			return vs[i], nil
		}
	}
	return version{}, fmt.Errorf("template %s: no such version: %w", name, sandbox.ErrNotFound)
}

// Templates lists the templates, by name.
func (s *Store) Templates() ([]Template, error) {
	s.lockAll()
	defer s.unlockAll()
	m, err := s.templates()
	if err != nil {
		return nil, err
	}
	out := []Template{}
	for _, n := range slices.Sorted(maps.Keys(m)) {
		t, err := s.templateLocked(n, m[n])
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func (s *Store) templateLocked(name string, vs []version) (Template, error) {
	t := Template{Name: name}
	for _, v := range vs {
		users, err := s.usersLocked(v.Digest)
		if err != nil {
			return Template{}, err
		}
		t.Versions = append(t.Versions, TemplateVersion{Version: v.Version, Digest: v.Digest, Created: v.Created, Users: len(users)})
	}
	return t, nil
}

// GetTemplate returns the template ref names (name, or name@version or name@sha256:… for one
// version). Errors: ErrInvalidRequest, ErrNotFound.
func (s *Store) GetTemplate(ref string) (Template, error) {
	name, ver, digest, err := ParseTemplateRef(ref)
	if err != nil {
		return Template{}, err
	}
	if name == "" {
		return Template{}, fmt.Errorf("template %q: a template is named, not a digest: %w", ref, sandbox.ErrInvalidRequest)
	}
	s.lockAll()
	defer s.unlockAll()
	m, err := s.templates()
	if err != nil {
		return Template{}, err
	}
	vs := m[name]
	if len(vs) == 0 {
		return Template{}, fmt.Errorf("template %s: %w", name, sandbox.ErrNotFound)
	}
	if ver != 0 || digest != "" {
		v, err := s.versionLocked(name, ver, digest)
		if err != nil {
			return Template{}, err
		}
		vs = []version{v}
	}
	return s.templateLocked(name, vs)
}

// RemoveTemplate removes the template ref names: every version of a name, or the one version of
// name@version or name@sha256:…. A version's snapshot goes with it unless another version is it.
// Errors: ErrInvalidRequest, ErrNotFound, ErrInUse (nothing removed) while a sandbox runs on one.
func (s *Store) RemoveTemplate(ref string) error {
	t, err := s.GetTemplate(ref)
	if err != nil {
		return err
	}
	s.lockAll()
	defer s.unlockAll()
	var digests []string
	for _, v := range t.Versions {
		digests = append(digests, v.Digest)
	}
	return s.removeDigestsLocked(digests, func(n string, v version) bool {
		return n == t.Name && slices.ContainsFunc(t.Versions, func(w TemplateVersion) bool { return w.Version == v.Version })
	})
}

// reconcileTemplates drops the template versions whose snapshot is not recorded (a crash between a
// record's removal and the templates' rewrite, or a record reconcile forgot). Called with the lock.
func (s *Store) reconcileTemplates() error {
	m, err := s.templates()
	if err != nil {
		return err
	}
	changed := false
	for n, vs := range m {
		kept := slices.DeleteFunc(slices.Clone(vs), func(v version) bool {
			_, err := os.Stat(s.recordPath(v.Digest))
			return err != nil
		})
		if len(kept) != len(vs) {
			changed = true
			m[n] = kept
		}
		if len(kept) == 0 {
			delete(m, n)
		}
	}
	if !changed {
		return nil
	}
	return s.writeMeta(s.templatesPath(), m)
}
