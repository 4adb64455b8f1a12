package core_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/core"
)

// TestSnapshotsNeedTheirCapabilities: a provider that claims neither filesystemSnapshot nor
// templateReference is asked nothing: every call is ErrUnsupportedCapability, a fork and a build
// record no sandbox; a fork's count is bounded before anything else.
func TestSnapshotsNeedTheirCapabilities(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb, err := e.rt.Create(ctx, spec("snap"))
	if err != nil {
		t.Fatal(err)
	}
	digest := "sha256:0000000000000000000000000000000000000000000000000000000000000000"
	for name, call := range map[string]func() error{
		"snapshot": func() error {
			_, err := e.rt.Snapshot(ctx, sb.ID, sb.Generation, sandbox.SnapshotOptions{})
			return err
		},
		"list":   func() error { _, err := e.rt.Snapshots(ctx); return err },
		"get":    func() error { _, err := e.rt.GetSnapshot(ctx, digest); return err },
		"remove": func() error { return e.rt.RemoveSnapshot(ctx, digest) },
		"fork":   func() error { _, err := e.rt.Fork(ctx, digest, 2, sandbox.Spec{}); return err },
		"templates": func() error {
			_, err := e.rt.Templates(ctx)
			return err
		},
		"build": func() error {
			_, err := e.rt.BuildTemplate(ctx, coreBuild("t", "x/y:1"), nil)
			return err
		},
		"create of a template": func() error {
			_, err := e.rt.Create(ctx, sandbox.Spec{ClientRequestID: "tpl", Template: "t"})
			return err
		},
	} {
		if err := call(); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
			t.Errorf("%s: %v, want ErrUnsupportedCapability", name, err)
		}
	}
	if _, err := e.rt.Snapshot(ctx, "sbx_none", 1, sandbox.SnapshotOptions{}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("snapshot of no sandbox: %v", err)
	}
	for _, n := range []int{0, 33} {
		if _, err := e.rt.Fork(ctx, digest, n, sandbox.Spec{}); !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Errorf("fork of %d: %v", n, err)
		}
	}
	if all, _ := e.rt.List(ctx); len(all) != 1 {
		t.Fatalf("%d sandboxes recorded, want the one created", len(all))
	}
}

func coreBuild(name, base string) core.TemplateBuild {
	return core.TemplateBuild{Name: name, BaseImage: base, Steps: []core.BuildStep{{Run: []string{"true"}}}}
}
