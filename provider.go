package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// Capability names a feature a provider may support.
type Capability string

// The capability names of the contract.
const (
	CapCommandExecution    Capability = "commandExecution"
	CapFileAccess          Capability = "fileAccess"
	CapInteractiveTerminal Capability = "interactiveTerminal"
	CapPortForwarding      Capability = "portForwarding"
	CapPauseResume         Capability = "pauseResume"
	CapFilesystemSnapshot  Capability = "filesystemSnapshot"
	CapMemorySnapshot      Capability = "memorySnapshot"
	CapPersistentVolume    Capability = "persistentVolume"
	CapNetworkPolicy       Capability = "networkPolicy"
	CapImageReference      Capability = "imageReference"
	CapTemplateReference   Capability = "templateReference"
	CapResourceLimits      Capability = "resourceLimits"
)

// Capabilities says which features a provider supports. Every field is always present on the wire.
type Capabilities struct {
	CommandExecution    bool `json:"commandExecution"`
	FileAccess          bool `json:"fileAccess"`
	InteractiveTerminal bool `json:"interactiveTerminal"`
	PortForwarding      bool `json:"portForwarding"`
	PauseResume         bool `json:"pauseResume"`
	FilesystemSnapshot  bool `json:"filesystemSnapshot"`
	MemorySnapshot      bool `json:"memorySnapshot"`
	PersistentVolume    bool `json:"persistentVolume"`
	NetworkPolicy       bool `json:"networkPolicy"`
	ImageReference      bool `json:"imageReference"`
	TemplateReference   bool `json:"templateReference"`
	ResourceLimits      bool `json:"resourceLimits"`
}

// Has reports whether the capability c is supported. An unknown name is never supported.
func (cs Capabilities) Has(c Capability) bool {
	switch c {
	case CapCommandExecution:
		return cs.CommandExecution
	case CapFileAccess:
		return cs.FileAccess
	case CapInteractiveTerminal:
		return cs.InteractiveTerminal
	case CapPortForwarding:
		return cs.PortForwarding
	case CapPauseResume:
		return cs.PauseResume
	case CapFilesystemSnapshot:
		return cs.FilesystemSnapshot
	case CapMemorySnapshot:
		return cs.MemorySnapshot
	case CapPersistentVolume:
		return cs.PersistentVolume
	case CapNetworkPolicy:
		return cs.NetworkPolicy
	case CapImageReference:
		return cs.ImageReference
	case CapTemplateReference:
		return cs.TemplateReference
	case CapResourceLimits:
		return cs.ResourceLimits
	}
	return false
}

// Manifest is what a provider says of itself.
type Manifest struct {
	Name         string       `json:"name"`
	Version      string       `json:"version"`
	RuntimeClass string       `json:"runtimeClass"`
	Capabilities Capabilities `json:"capabilities"`
}

// Validate checks a manifest a provider returned. It returns ErrProviderProtocol when it is malformed.
func (m Manifest) Validate() error {
	if m.Name == "" || m.Version == "" || m.RuntimeClass == "" {
		return fmt.Errorf("manifest needs a name, version and runtime class, got %q %q %q: %w",
			m.Name, m.Version, m.RuntimeClass, ErrProviderProtocol)
	}
	return nil
}

// ObservedState is what a provider saw of one sandbox generation.
type ObservedState string

// The observed states.
const (
	ObservedAbsent   ObservedState = "absent"   // the provider holds no resource for the generation
	ObservedStarting ObservedState = "starting" // allocated, not yet answering
	ObservedReady    ObservedState = "ready"    // allocated and answering
	ObservedPaused   ObservedState = "paused"   // allocated and frozen
	ObservedFailed   ObservedState = "failed"   // allocated but broken, or gone when it should be there
)

// ObservedStates lists every observed state.
var ObservedStates = []ObservedState{ObservedAbsent, ObservedStarting, ObservedReady, ObservedPaused, ObservedFailed}

// Observation is a provider's report on one sandbox generation. Providers never touch the store: they
// report, and the runtime core decides.
type Observation struct {
	Ref        Ref                        // the generation observed; must be the one asked about
	State      ObservedState              // what the provider saw
	Reason     string                     // a stable, machine-readable reason, required when failed
	Message    string                     // a human-readable detail
	Endpoint   *Endpoint                  // where the sandbox can be reached, if anywhere
	Extensions map[string]json.RawMessage // provider payloads, kept under providerExtensions
}

// Validate checks an observation a provider returned for want. It returns ErrProviderProtocol when it is
// malformed or about another generation.
func (o Observation) Validate(want Ref) error {
	if o.Ref != want {
		return fmt.Errorf("observation is of %s, asked for %s: %w", o.Ref, want, ErrProviderProtocol)
	}
	switch o.State {
	case ObservedAbsent, ObservedStarting, ObservedReady, ObservedPaused:
	case ObservedFailed:
		if o.Reason == "" {
			return fmt.Errorf("failed observation of %s without a reason: %w", want, ErrProviderProtocol)
		}
	default:
		return fmt.Errorf("observation of %s has unknown state %q: %w", want, o.State, ErrProviderProtocol)
	}
	if o.Endpoint != nil && o.Endpoint.BaseURL == "" {
		return fmt.Errorf("observation of %s has an empty endpoint: %w", want, ErrProviderProtocol)
	}
	for k, v := range o.Extensions {
		if !json.Valid(v) {
			return fmt.Errorf("observation of %s has invalid JSON in extension %q: %w", want, k, ErrProviderProtocol)
		}
	}
	return nil
}

// Command is one program to run in a sandbox.
type Command struct {
	Argv           []string          // executed directly, never through a shell
	Cwd            string            // relative to the sandbox working directory, or absolute inside it
	Env            map[string]string // added to the sandbox's base environment
	Timeout        time.Duration     // the whole process group is killed past it
	MaxOutputBytes int               // cap of stdout and of stderr, independently
}

// Command defaults and bounds.
const (
	DefaultCommandTimeout = 60 * time.Second
	MaxCommandTimeout     = time.Hour
	DefaultMaxOutputBytes = 1 << 20
	MaxMaxOutputBytes     = 10 << 20
	MaxCwdBytes           = 4096    // PATH_MAX
	MaxArgvEnvBytes       = 1 << 20 // argv and env as execve counts them: half the usual ARG_MAX
)

// Normalize returns c with its defaults filled in (a zero or negative Timeout or MaxOutputBytes is the
// default), or the reason it is out of bounds. It is the one place a command gets its defaults and
// bounds: the core applies it before a provider sees the command.
//
// Errors: ErrInvalidRequest for no argv, a timeout or output cap past its maximum, or a cwd, argv or
// env past its bound in bytes.
func (c Command) Normalize() (Command, error) {
	if len(c.Argv) == 0 {
		return Command{}, fmt.Errorf("command needs argv: %w", ErrInvalidRequest)
	}
	if n := len(c.Cwd); n > MaxCwdBytes {
		return Command{}, tooLong("cwd", n, MaxCwdBytes)
	}
	n := 0
	for _, a := range c.Argv {
		n += len(a) + 1 // and its NUL
	}
	for k, v := range c.Env {
		n += len(k) + len(v) + 2 // "k=v" and its NUL
	}
	if n > MaxArgvEnvBytes {
		return Command{}, tooLong("argv and env", n, MaxArgvEnvBytes)
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultCommandTimeout
	}
	if c.Timeout > MaxCommandTimeout {
		return Command{}, fmt.Errorf("timeout %v past %v: %w", c.Timeout, MaxCommandTimeout, ErrInvalidRequest)
	}
	if c.MaxOutputBytes <= 0 {
		c.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if c.MaxOutputBytes > MaxMaxOutputBytes {
		return Command{}, fmt.Errorf("maxOutputBytes %d past %d: %w", c.MaxOutputBytes, MaxMaxOutputBytes, ErrInvalidRequest)
	}
	return c, nil
}

func tooLong(what string, n, most int) error {
	return fmt.Errorf("%s is %d bytes, over the limit of %d: %w", what, n, most, ErrInvalidRequest)
}

// CommandResult is how a command ended. ExitCode is nil when it timed out or was cancelled.
type CommandResult struct {
	ExitCode   *int      `json:"exitCode"`
	Stdout     string    `json:"stdout"`
	Stderr     string    `json:"stderr"`
	TimedOut   bool      `json:"timedOut"`
	Cancelled  bool      `json:"cancelled"`
	Truncated  bool      `json:"truncated"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`
}

// Validate checks a result a provider returned for cmd, as Normalize returned it. It is the one check of
// a command's result: the core applies it to what every provider returns, and the agent's client to what
// arrives on its socket. It returns ErrProviderProtocol when the result is malformed.
func (r CommandResult) Validate(cmd Command) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("command result: "+format+": %w", append(args, ErrProviderProtocol)...)
	}
	switch {
	case (r.TimedOut || r.Cancelled) && r.ExitCode != nil:
		return bad("exit code %d on a command that timed out or was cancelled", *r.ExitCode)
	case !r.TimedOut && !r.Cancelled && r.ExitCode == nil:
		return bad("no exit code on a command that ended")
	case r.ExitCode != nil && (*r.ExitCode < 0 || *r.ExitCode > 255):
		return bad("exit code %d out of range", *r.ExitCode)
	case len(r.Stdout) > cmd.MaxOutputBytes || len(r.Stderr) > cmd.MaxOutputBytes:
		return bad("output of %d and %d bytes past the cap of %d", len(r.Stdout), len(r.Stderr), cmd.MaxOutputBytes)
	case r.StartedAt.IsZero() || r.FinishedAt.Before(r.StartedAt):
		return bad("times %v to %v", r.StartedAt, r.FinishedAt)
	}
	return nil
}

// TruncateUTF8 cuts s to at most n bytes without splitting a UTF-8 sequence.
func TruncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for i := 0; i < utf8.UTFMax && len(s) > 0; i++ {
		r, size := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || size != 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}

// FileKind is the kind of a directory entry.
type FileKind string

// The entry kinds.
const (
	KindFile      FileKind = "file"
	KindDirectory FileKind = "directory"
)

// FileEntry is one entry of a directory listing.
type FileEntry struct {
	Path string   `json:"path"` // as the client would pass it back
	Kind FileKind `json:"kind"`
	Size int64    `json:"size"`
}

// MaxFileBytes is the largest file content that travels through the API, read or written.
const MaxFileBytes = 24 << 20

// Provider allocates, observes and releases sandbox generations. Every method is idempotent for a ref:
// allocating an existing generation returns it, releasing an absent one succeeds.
//
// Errors: a provider returns ErrProviderUnavailable (wrapped) when it fails or cannot be reached,
// ErrProviderProtocol when what it got from its own backend is malformed. The core validates what it
// returns in any case.
type Provider interface {
	// Manifest describes the provider.
	Manifest(ctx context.Context) (Manifest, error)
	// Allocate makes the resource of ref from spec, or finds the existing one.
	Allocate(ctx context.Context, ref Ref, spec Spec) (Observation, error)
	// Observe reports on ref; a resource the provider does not hold is ObservedAbsent.
	Observe(ctx context.Context, ref Ref) (Observation, error)
	// Release stops and removes everything made for ref.
	Release(ctx context.Context, ref Ref) error
	// Resources lists every generation the provider holds a resource for, live or not.
	Resources(ctx context.Context) ([]Ref, error)
}

// ReasonPreparing is the reason of an ObservedStarting observation of a generation a Preparer is
// preparing, or began to prepare and did not finish (its process stopped meanwhile).
const ReasonPreparing = "preparing"

// Preparer is a provider whose allocation of some specs first does something that may take far longer
// than one provider call should (an image pull). The core then moves the sandbox to starting, calls
// Prepare in the background under a bound of its own, and Allocate once it is done: the sandbox is
// observably starting meanwhile, and a create answers at once.
//
// From a NeedsPreparation that answers true until Allocate or Release of ref, Observe reports ref,
// when it holds nothing else of it, as ObservedStarting with reason ReasonPreparing, also after a
// restart: the core then prepares it again (the preparation resumes) unless a preparation is in flight.
type Preparer interface {
	// NeedsPreparation reports whether ref, of spec, must be prepared before Allocate, and if so
	// records that its preparation has begun. It does nothing long (a local look-up).
	NeedsPreparation(ctx context.Context, ref Ref, spec Spec) (bool, error)
	// Prepare does the preparation. It returns ObservedStarting when Allocate may follow, and
	// ObservedFailed, with the reason, when ref cannot be allocated (its preparation is over then).
	Prepare(ctx context.Context, ref Ref, spec Spec) (Observation, error)
}

// SpecValidator is a provider that refuses some specs before anything is recorded: resources past its
// bounds, for one. The core asks it with the request's own validation, so a refused create or recreate
// records nothing.
//
// Errors: ErrInvalidRequest.
type SpecValidator interface {
	ValidateSpec(spec Spec) error
}

// Executor is a provider that runs commands. A program that cannot start is a result with exit code 127.
// The core hands it commands as Command.Normalize returns them; other callers (the conformance suite)
// may leave Timeout or MaxOutputBytes zero, which means the default, as Normalize fills it in.
type Executor interface {
	Exec(ctx context.Context, ref Ref, cmd Command) (CommandResult, error)
}

// FileSystem is a provider that reads and writes files inside a sandbox. Paths resolve inside the
// sandbox's root as if it were "/": nothing outside is ever reached. Missing paths are ErrNotFound; a
// directory where a file is expected, or the reverse, is ErrInvalidRequest.
type FileSystem interface {
	ReadFile(ctx context.Context, ref Ref, path string) ([]byte, error)
	WriteFile(ctx context.Context, ref Ref, path string, data []byte) error
	ListFiles(ctx context.Context, ref Ref, path string) ([]FileEntry, error)
}

// PauseResumer is a provider that can freeze and thaw a sandbox.
type PauseResumer interface {
	Pause(ctx context.Context, ref Ref) error
	Resume(ctx context.Context, ref Ref) error
}
