package sandbox

import (
	"context"
	"time"
)

// SnapshotInfo is a filesystem snapshot a provider holds: the image a sandbox ran on with what it
// wrote on top, frozen at one instant. Its ID is its digest; spec.template may name it.
type SnapshotInfo struct {
	ID         string     `json:"id"`
	Digest     string     `json:"digest"`
	SandboxID  ID         `json:"sandboxId"`
	Generation Generation `json:"generation"`
	BaseDigest string     `json:"baseDigest"`
	CreatedAt  time.Time  `json:"createdAt"`
	Layers     int        `json:"layers"`
	Users      int        `json:"users"`     // the sandboxes that run on it now
	Templates  []string   `json:"templates"` // name@version of each template version it is
}

// TemplateInfo is a named template: its versions, oldest first, each a snapshot.
type TemplateInfo struct {
	Name     string            `json:"name"`
	Versions []TemplateVersion `json:"versions"`
}

// TemplateVersion is one version of a template.
type TemplateVersion struct {
	Version   int       `json:"version"`
	Digest    string    `json:"digest"`
	CreatedAt time.Time `json:"createdAt"`
	Users     int       `json:"users"`
}

// Snapshotter is implemented by a provider that snapshots its sandboxes' filesystems
// (filesystemSnapshot) and runs sandboxes of them and of templates (templateReference).
type Snapshotter interface {
	// Snapshot captures the filesystem of ref's sandbox, frozen for the instant it takes; opts.Name,
	// when set, makes the snapshot the newest version of that template. Errors: ErrNotFound,
	// ErrInvalidState (not running, or on no image of its own), ErrInvalidRequest (a bad name, or a
	// filesystem the provider will not capture), ErrProviderUnavailable.
	Snapshot(ctx context.Context, ref Ref, opts SnapshotOptions) (SnapshotInfo, error)
	// Snapshots lists the snapshots, oldest first.
	Snapshots(ctx context.Context) ([]SnapshotInfo, error)
	// GetSnapshot returns the snapshot id. Errors: ErrNotFound.
	GetSnapshot(ctx context.Context, id string) (SnapshotInfo, error)
	// RemoveSnapshot removes it and the template versions that are it. Errors: ErrNotFound,
	// ErrInvalidState while a sandbox runs on it.
	RemoveSnapshot(ctx context.Context, id string) error
	// Templates lists the templates by name.
	Templates(ctx context.Context) ([]TemplateInfo, error)
	// Template returns the template ref names: name (all versions), name@version or name@sha256:….
	// Errors: ErrInvalidRequest, ErrNotFound.
	Template(ctx context.Context, ref string) (TemplateInfo, error)
	// RemoveTemplate removes the versions ref names. Errors: as Template, and ErrInvalidState while a
	// sandbox runs on one.
	RemoveTemplate(ctx context.Context, ref string) error
}

// SnapshotOptions says what to make of a snapshot: a version of the template Name, when set, and the
// environment variables (NAME=value, replacing the image's of the same name) and working directory
// the sandboxes of it start with, when set.
type SnapshotOptions struct {
	Name       string
	Env        []string
	WorkingDir string
}
