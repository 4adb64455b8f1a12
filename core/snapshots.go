package core

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/sandboxd/sandbox"
)

// snapshotter is the provider's snapshots, once the manifest claims c.
//
// Errors: ErrUnsupportedCapability.
func (r *Runtime) snapshotter(c sandbox.Capability) (sandbox.Snapshotter, error) {
	if err := r.require(c); err != nil {
		return nil, err
	}
	sn, ok := r.prov.(sandbox.Snapshotter)
	if !ok {
		return nil, fmt.Errorf("provider %q takes no snapshots: %w", r.cachedManifest().Name, sandbox.ErrUnsupportedCapability)
	}
	return sn, nil
}

// Snapshot captures the filesystem of a ready or paused sandbox as a snapshot, a version of the
// template opts.Name when that is set.
//
// Errors: ErrNotFound, ErrUnsupportedCapability, ErrGenerationConflict, ErrInvalidState, ErrInvalidRequest,
// ErrProviderUnavailable.
func (r *Runtime) Snapshot(ctx context.Context, id sandbox.ID, gen sandbox.Generation, opts sandbox.SnapshotOptions) (sandbox.SnapshotInfo, error) {
	sb, err := r.store.Get(ctx, id)
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	sn, err := r.snapshotter(sandbox.CapFilesystemSnapshot)
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	if err := checkGeneration(sb, "snapshot", gen); err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	if sb.State != sandbox.StateReady && sb.State != sandbox.StatePaused {
		return sandbox.SnapshotInfo{}, fmt.Errorf("snapshot %s: it is %s, not ready or paused: %w", id, sb.State, sandbox.ErrInvalidState)
	}
	// Not bound by the provider timeout: a large upper takes the time its bytes take.
	info, err := sn.Snapshot(context.WithoutCancel(ctx), sb.Ref(), opts)
	if err != nil {
		r.providerTrouble(sb.Ref(), err)
		return sandbox.SnapshotInfo{}, err
	}
	r.log.Info("sandbox snapshotted", "sandbox", id, "generation", gen, "snapshot", info.Digest, "template", opts.Name)
	return info, nil
}

// Snapshots lists the provider's snapshots. Errors: ErrUnsupportedCapability.
func (r *Runtime) Snapshots(ctx context.Context) ([]sandbox.SnapshotInfo, error) {
	sn, err := r.snapshotter(sandbox.CapFilesystemSnapshot)
	if err != nil {
		return nil, err
	}
	return sn.Snapshots(ctx)
}

// GetSnapshot returns one snapshot. Errors: ErrNotFound, ErrUnsupportedCapability.
func (r *Runtime) GetSnapshot(ctx context.Context, id string) (sandbox.SnapshotInfo, error) {
	sn, err := r.snapshotter(sandbox.CapFilesystemSnapshot)
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	return sn.GetSnapshot(ctx, id)
}

// RemoveSnapshot removes one. Errors: ErrNotFound, ErrInvalidState (a sandbox runs on it),
// ErrUnsupportedCapability.
func (r *Runtime) RemoveSnapshot(ctx context.Context, id string) error {
	sn, err := r.snapshotter(sandbox.CapFilesystemSnapshot)
	if err != nil {
		return err
	}
	return sn.RemoveSnapshot(ctx, id)
}

// MaxFork bounds how many sandboxes one fork makes.
const MaxFork = 32

// forkParallel bounds how many of a fork's creates run at once.
const forkParallel = 4

// Fork creates count sandboxes of the snapshot id, each an ordinary create of spec with spec.template
// naming the snapshot; the i-th's clientRequestId is spec's with "/fork-i" appended, so a repeated
// fork makes no more. The creates run a few at once. It returns those it made, in order, and the
// first error of those that failed.
//
// Errors: ErrInvalidRequest, ErrNotFound (no such snapshot), ErrUnsupportedCapability, and Create's.
func (r *Runtime) Fork(ctx context.Context, id string, count int, spec sandbox.Spec) ([]*sandbox.Sandbox, error) {
	if count < 1 || count > MaxFork {
		return nil, fmt.Errorf("fork of %d: from 1 to %d: %w", count, MaxFork, sandbox.ErrInvalidRequest)
	}
	if spec.Image != "" || spec.Template != "" {
		return nil, fmt.Errorf("fork: the spec's root is the snapshot's, it names no image or template: %w", sandbox.ErrInvalidRequest)
	}
	if _, err := r.snapshotter(sandbox.CapTemplateReference); err != nil {
		return nil, err
	}
	if _, err := r.GetSnapshot(ctx, id); err != nil {
		return nil, err
	}
	if spec.ClientRequestID == "" {
		spec.ClientRequestID = "fork-" + string(sandbox.NewID())
	}
	key := spec.ClientRequestID
	spec.Template = id
	made := make([]*sandbox.Sandbox, count)
	errs := make([]error, count)
	sem := make(chan struct{}, forkParallel)
	var wg sync.WaitGroup
	for i := range count {
		one := spec
		one.ClientRequestID = key + "/fork-" + strconv.Itoa(i)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			made[i], errs[i] = r.Create(ctx, one)
		}()
	}
	wg.Wait()
	out := make([]*sandbox.Sandbox, 0, count)
	for i, sb := range made {
		if errs[i] == nil && sb != nil {
			out = append(out, sb)
		}
	}
	return out, firstError(errs)
}

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Templates lists the provider's templates. Errors: ErrUnsupportedCapability.
func (r *Runtime) Templates(ctx context.Context) ([]sandbox.TemplateInfo, error) {
	sn, err := r.snapshotter(sandbox.CapTemplateReference)
	if err != nil {
		return nil, err
	}
	return sn.Templates(ctx)
}

// Template returns the template ref names. Errors: ErrInvalidRequest, ErrNotFound,
// ErrUnsupportedCapability.
func (r *Runtime) Template(ctx context.Context, ref string) (sandbox.TemplateInfo, error) {
	sn, err := r.snapshotter(sandbox.CapTemplateReference)
	if err != nil {
		return sandbox.TemplateInfo{}, err
	}
	return sn.Template(ctx, ref)
}

// RemoveTemplate removes the versions ref names. Errors: as Template, and ErrInvalidState while a
// sandbox runs on one.
func (r *Runtime) RemoveTemplate(ctx context.Context, ref string) error {
	sn, err := r.snapshotter(sandbox.CapTemplateReference)
	if err != nil {
		return err
	}
	return sn.RemoveTemplate(ctx, ref)
}

// TemplateBuild says how to build a template: from the image BaseImage, Steps run in order in a
// sandbox of it made for the build, whose filesystem then is the template Name's newest version.
type TemplateBuild struct {
	Name       string
	BaseImage  string
	Steps      []BuildStep
	Env        []string
	WorkingDir string
}

// BuildStep is one step of a build: a command (Run, argv, run directly, which must exit 0) or a file
// written (File).
type BuildStep struct {
	Run  []string
	File *BuildFile
}

// BuildFile is a file a build writes, with its mode when not zero (set by the image's chmod).
type BuildFile struct {
	Path    string
	Content []byte
	Mode    os.FileMode
}

// BuildTemplate builds a template (TemplateBuild) and returns its new version. The build's sandbox
// is terminated in any case; progress, when not nil, is told of each step. A step that fails fails the
// build (ErrInvalidRequest, with the step's stderr), and no version is made.
//
// Errors: ErrInvalidRequest, ErrUnsupportedCapability, ErrProviderUnavailable, and Create's.
func (r *Runtime) BuildTemplate(ctx context.Context, b TemplateBuild, progress func(step int, what string)) (sandbox.TemplateInfo, error) {
	if progress == nil {
		progress = func(int, string) {}
	}
	if _, err := r.snapshotter(sandbox.CapTemplateReference); err != nil {
		return sandbox.TemplateInfo{}, err
	}
	if err := r.require(sandbox.CapFilesystemSnapshot, sandbox.CapImageReference, sandbox.CapCommandExecution); err != nil {
		return sandbox.TemplateInfo{}, err
	}
	if b.BaseImage == "" || b.Name == "" {
		return sandbox.TemplateInfo{}, fmt.Errorf("a template build needs a name and a base image: %w", sandbox.ErrInvalidRequest)
	}
	progress(0, "starting a sandbox of "+b.BaseImage)
	sb, err := r.Create(ctx, sandbox.Spec{ClientRequestID: "template-build-" + string(sandbox.NewID()), Image: b.BaseImage})
	if sb != nil {
		defer func() {
			if _, err := r.Terminate(context.WithoutCancel(ctx), sb.ID, sb.Generation); err != nil {
				r.log.Warn("terminating a template build's sandbox", "sandbox", sb.ID, "err", err)
			}
		}()
	}
	if err != nil {
		return sandbox.TemplateInfo{}, err
	}
	if sb, err = r.waitReady(ctx, sb); err != nil {
		return sandbox.TemplateInfo{}, err
	}
	for i, st := range b.Steps {
		switch {
		case len(st.Run) > 0:
			progress(i+1, fmt.Sprintf("run %q", st.Run))
			res, err := r.Exec(ctx, sb.ID, sb.Generation, sandbox.Command{Argv: st.Run, Timeout: 30 * time.Minute})
			if err != nil {
				return sandbox.TemplateInfo{}, fmt.Errorf("step %d: %w", i+1, err)
			}
			if res.ExitCode == nil || *res.ExitCode != 0 {
				return sandbox.TemplateInfo{}, fmt.Errorf("step %d %q: exit %s: %s: %w", i+1, st.Run, exitOf(res), tail(res.Stderr), sandbox.ErrInvalidRequest)
			}
		case st.File != nil:
			progress(i+1, "write "+st.File.Path)
			if err := r.WriteFile(ctx, sb.ID, sb.Generation, st.File.Path, st.File.Content); err != nil {
				return sandbox.TemplateInfo{}, fmt.Errorf("step %d: %w", i+1, err)
			}
			if st.File.Mode != 0 {
				mode := strconv.FormatUint(uint64(st.File.Mode.Perm()), 8)
				res, err := r.Exec(ctx, sb.ID, sb.Generation, sandbox.Command{Argv: []string{"chmod", mode, st.File.Path}, Timeout: time.Minute})
				if err == nil && (res.ExitCode == nil || *res.ExitCode != 0) {
					err = fmt.Errorf("chmod %s: %s: %w", mode, tail(res.Stderr), sandbox.ErrInvalidRequest)
				}
				if err != nil {
					return sandbox.TemplateInfo{}, fmt.Errorf("step %d: %w", i+1, err)
				}
			}
		default:
			return sandbox.TemplateInfo{}, fmt.Errorf("step %d is neither a command nor a file: %w", i+1, sandbox.ErrInvalidRequest)
		}
	}
	progress(len(b.Steps)+1, "snapshot")
	info, err := r.Snapshot(ctx, sb.ID, sb.Generation, sandbox.SnapshotOptions{Name: b.Name, Env: b.Env, WorkingDir: b.WorkingDir})
	if err != nil {
		return sandbox.TemplateInfo{}, err
	}
	t, err := r.Template(ctx, b.Name+"@"+info.Digest)
	if err != nil {
		return sandbox.TemplateInfo{}, err
	}
	return t, nil
}

// waitReady waits until sb is ready, and fails when it fails or terminates first.
func (r *Runtime) waitReady(ctx context.Context, sb *sandbox.Sandbox) (*sandbox.Sandbox, error) {
	deadline := time.Now().Add(r.cfg.PrepareTimeout + r.cfg.ReadyTimeout + r.cfg.ProviderTimeout)
	for {
		switch sb.State {
		case sandbox.StateReady:
			return sb, nil
		case sandbox.StateFailed, sandbox.StateTerminated, sandbox.StateTerminating:
			msg := ""
			if sb.Failure != nil {
				msg = sb.Failure.Code + ": " + sb.Failure.Message
			}
			return nil, fmt.Errorf("sandbox %s is %s %s: %w", sb.ID, sb.State, msg, sandbox.ErrInvalidRequest)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("sandbox %s is still %s: %w", sb.ID, sb.State, sandbox.ErrProviderUnavailable)
		}
		wake, stop := r.Watch()
		select {
		case <-wake:
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		}
		stop()
		var err error
		if sb, err = r.store.Get(ctx, sb.ID); err != nil {
			return nil, err
		}
	}
}

func exitOf(res sandbox.CommandResult) string {
	if res.ExitCode == nil {
		if res.TimedOut {
			return "timed out"
		}
		return "none"
	}
	return strconv.Itoa(*res.ExitCode)
}

// tail is the end of a command's stderr, for an error message.
func tail(s string) string {
	if len(s) > 512 {
		s = "…" + s[len(s)-512:]
	}
	return s
}
