package client

import (
	"context"
	"net/url"

	"github.com/sandboxd/sandbox"
)

// Snapshot captures the filesystem of a ready or paused sandbox as a snapshot; name, when not "",
// makes it that template's newest version. Errors: ErrNotFound, ErrGenerationConflict,
// ErrInvalidState (not running, or on no image of its own), ErrInvalidRequest,
// ErrUnsupportedCapability.
func (c *Client) Snapshot(ctx context.Context, id sandbox.ID, gen sandbox.Generation, name string) (*sandbox.SnapshotInfo, error) {
	body := map[string]any{"expectedGeneration": gen}
	if name != "" {
		body["name"] = name
	}
	var info sandbox.SnapshotInfo
	if err := c.do(ctx, call{method: "POST", path: "/v1/sandboxes/" + url.PathEscape(string(id)) + "/snapshots", body: body}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Snapshots lists the daemon's snapshots, oldest first. Errors: ErrUnsupportedCapability.
func (c *Client) Snapshots(ctx context.Context) ([]sandbox.SnapshotInfo, error) {
	var out struct {
		Snapshots []sandbox.SnapshotInfo `json:"snapshots"`
	}
	if err := c.do(ctx, call{method: "GET", path: "/v1/snapshots", safe: true}, &out); err != nil {
		return nil, err
	}
	return out.Snapshots, nil
}

// GetSnapshot returns one snapshot. Errors: ErrNotFound, ErrUnsupportedCapability.
func (c *Client) GetSnapshot(ctx context.Context, id string) (*sandbox.SnapshotInfo, error) {
	var info sandbox.SnapshotInfo
	if err := c.do(ctx, call{method: "GET", path: "/v1/snapshots/" + url.PathEscape(id), safe: true}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// DeleteSnapshot removes a snapshot and the template versions that are it. Errors: ErrNotFound,
// ErrInvalidState (a sandbox runs on it), ErrUnsupportedCapability.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.do(ctx, call{method: "DELETE", path: "/v1/snapshots/" + url.PathEscape(id)}, nil)
}

// ForkOptions are what each sandbox of a fork has besides the snapshot.
type ForkOptions struct {
	// ClientRequestID, when set, makes a repeated fork make no more sandboxes.
	ClientRequestID      string
	Resources            *sandbox.Resources
	RequiredCapabilities []sandbox.Capability
	Extensions           map[string]any
}

// Fork creates count sandboxes (1 to 32) of the snapshot id and returns their ids. Errors:
// ErrInvalidRequest, ErrNotFound, ErrUnsupportedCapability, and CreateSandbox's.
func (c *Client) Fork(ctx context.Context, id string, count int, opts ForkOptions) ([]sandbox.ID, error) {
	body := map[string]any{"count": count}
	if opts.ClientRequestID != "" {
		body["clientRequestId"] = opts.ClientRequestID
	}
	spec := map[string]any{}
	if opts.Resources != nil {
		spec["resources"] = opts.Resources
	}
	if len(opts.RequiredCapabilities) > 0 {
		spec["requiredCapabilities"] = opts.RequiredCapabilities
	}
	if len(opts.Extensions) > 0 {
		spec["extensions"] = opts.Extensions
	}
	if len(spec) > 0 {
		body["spec"] = spec
	}
	var out struct {
		SandboxIDs []sandbox.ID `json:"sandboxIds"`
	}
	if err := c.do(ctx, call{method: "POST", path: "/v1/snapshots/" + url.PathEscape(id) + "/fork", body: body, safe: opts.ClientRequestID != ""}, &out); err != nil {
		return nil, err
	}
	return out.SandboxIDs, nil
}

// TemplateBuild is a template build's request: a sandbox of BaseImage runs Steps, then is the
// template Name's newest version.
type TemplateBuild struct {
	Name      string         `json:"name" yaml:"name"`
	BaseImage string         `json:"baseImage" yaml:"baseImage"`
	Steps     []TemplateStep `json:"steps,omitempty" yaml:"steps"`
	Env       []string       `json:"env,omitempty" yaml:"env"`
	Workdir   string         `json:"workdir,omitempty" yaml:"workdir"`
}

// TemplateStep is a command to run (argv, run directly) or a file to write.
type TemplateStep struct {
	Run  []string      `json:"run,omitempty" yaml:"run"`
	File *TemplateFile `json:"file,omitempty" yaml:"file"`
}

// TemplateFile is a file a build writes; Content is sent as base64.
type TemplateFile struct {
	Path    string `json:"path" yaml:"path"`
	Content []byte `json:"content" yaml:"-"`
	Mode    uint32 `json:"mode,omitempty" yaml:"mode"`
}

// BuildTemplate builds a new version of a template and returns the template with only that version.
// Errors: ErrInvalidRequest (a step failed), ErrNotFound (no such base image),
// ErrUnsupportedCapability.
func (c *Client) BuildTemplate(ctx context.Context, b TemplateBuild) (*sandbox.TemplateInfo, error) {
	var t sandbox.TemplateInfo
	if err := c.do(ctx, call{method: "POST", path: "/v1/templates", body: b}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// Templates lists the daemon's templates. Errors: ErrUnsupportedCapability.
func (c *Client) Templates(ctx context.Context) ([]sandbox.TemplateInfo, error) {
	var out struct {
		Templates []sandbox.TemplateInfo `json:"templates"`
	}
	if err := c.do(ctx, call{method: "GET", path: "/v1/templates", safe: true}, &out); err != nil {
		return nil, err
	}
	return out.Templates, nil
}

// Template returns the template ref names: name (all its versions), name@version or name@sha256:….
// Errors: ErrInvalidRequest, ErrNotFound, ErrUnsupportedCapability.
func (c *Client) Template(ctx context.Context, ref string) (*sandbox.TemplateInfo, error) {
	var t sandbox.TemplateInfo
	if err := c.do(ctx, call{method: "GET", path: "/v1/templates/" + url.PathEscape(ref), safe: true}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// DeleteTemplate removes the versions ref names. Errors: as Template, and ErrInvalidState while a
// sandbox runs on one.
func (c *Client) DeleteTemplate(ctx context.Context, ref string) error {
	return c.do(ctx, call{method: "DELETE", path: "/v1/templates/" + url.PathEscape(ref)}, nil)
}
