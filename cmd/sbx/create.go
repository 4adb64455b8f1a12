package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
)

// specFlags are the flags that describe a sandbox, shared by create and run.
type specFlags struct {
	image, template, requestID string
	cpu, memory, disk          int64
	require, extensions        []string
	ttl, idle                  time.Duration
	onIdle                     string
	volumes                    []string
	fromCheckpoint             string
}

func (f *specFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.image, "image", "", "image reference to start from (needs the imageReference capability)")
	fs.StringVar(&f.template, "template", "", "template to start from (needs the templateReference capability)")
	fs.Int64Var(&f.cpu, "cpu", 0, "CPU limit in millicores")
	fs.Int64Var(&f.memory, "memory", 0, "memory limit in MiB")
	fs.Int64Var(&f.disk, "disk", 0, "disk limit in MiB")
	fs.StringArrayVar(&f.require, "require", nil, "a capability the provider must have (repeatable)")
	fs.StringArrayVar(&f.extensions, "extension", nil, "a provider extension as KEY=JSON (repeatable)")
	fs.StringVar(&f.requestID, "request-id", "", "clientRequestId: repeating a create with the same id returns the same sandbox (default: random)")
	fs.DurationVar(&f.ttl, "ttl", 0, "time to live: the sandbox is terminated this long after its create (whole seconds; sandboxd.lifetime)")
	fs.DurationVar(&f.idle, "idle", 0, "idle bound: the sandbox is paused (or terminated, --on-idle) after this long unused (whole seconds)")
	fs.StringVar(&f.onIdle, "on-idle", "", "what an idle sandbox undergoes: pause or terminate (default: the daemon's)")
	fs.StringArrayVarP(&f.volumes, "volume", "v", nil, "mount a persistent volume: NAME:PATH, or NAME:PATH:ro (repeatable; sandboxd.volumes)")
	fs.StringVar(&f.fromCheckpoint, "from-checkpoint", "", "start from a checkpoint: SANDBOX_ID/CHECKPOINT_ID (needs memorySnapshot; sandboxd.checkpoint)")
}

// spec builds the sandbox spec from the flags.
func (f *specFlags) spec() (sandbox.Spec, error) {
	if f.image != "" && f.template != "" {
		return sandbox.Spec{}, usagef("--image and --template exclude each other")
	}
	s := sandbox.Spec{ClientRequestID: f.requestID, Image: f.image, Template: f.template}
	if s.ClientRequestID == "" {
		s.ClientRequestID = client.NewRequestID()
	}
	if f.cpu < 0 || f.memory < 0 || f.disk < 0 {
		return sandbox.Spec{}, usagef("--cpu, --memory and --disk are positive")
	}
	if f.cpu > 0 || f.memory > 0 || f.disk > 0 {
		s.Resources = &sandbox.Resources{CPUMillis: f.cpu, MemoryMiB: f.memory, DiskMiB: f.disk}
	}
	for _, c := range f.require {
		s.RequiredCapabilities = append(s.RequiredCapabilities, sandbox.Capability(c))
	}
	for _, kv := range f.extensions {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || !json.Valid([]byte(v)) {
			return sandbox.Spec{}, usagef("--extension %q: want KEY=JSON, e.g. acme.gpu={\"count\":1}", kv)
		}
		if s.Extensions == nil {
			s.Extensions = map[string]json.RawMessage{}
		}
		s.Extensions[k] = json.RawMessage(v)
	}
	if len(f.volumes) > 0 {
		if _, ok := s.Extensions[sandbox.VolumesKey]; ok {
			return sandbox.Spec{}, usagef("-v excludes --extension %s=...", sandbox.VolumesKey)
		}
		var mounts []sandbox.VolumeMount
		for _, v := range f.volumes {
			m, err := parseVolumeFlag(v)
			if err != nil {
				return sandbox.Spec{}, err
			}
			mounts = append(mounts, m)
		}
		var err error
		if s, err = client.VolumeMounts(s, mounts...); err != nil {
			return sandbox.Spec{}, err
		}
	}
	if f.fromCheckpoint != "" {
		id, ckpt, ok := strings.Cut(f.fromCheckpoint, "/")
		if !ok || id == "" || ckpt == "" {
			return sandbox.Spec{}, usagef("--from-checkpoint %q: want SANDBOX_ID/CHECKPOINT_ID (sbx checkpoints ID lists them)", f.fromCheckpoint)
		}
		s = client.ForkSpec(s, sandbox.ID(id), ckpt)
	}
	if f.ttl != 0 || f.idle != 0 || f.onIdle != "" {
		if _, ok := s.Extensions["sandboxd.lifetime"]; ok {
			return sandbox.Spec{}, usagef("--ttl, --idle and --on-idle exclude --extension sandboxd.lifetime=...")
		}
		lt := map[string]any{}
		for _, d := range []struct {
			flag, key string
			v         time.Duration
		}{{"--ttl", "ttlSeconds", f.ttl}, {"--idle", "idleSeconds", f.idle}} {
			if d.v < 0 || d.v%time.Second != 0 {
				return sandbox.Spec{}, usagef("%s %s: want a positive number of whole seconds", d.flag, d.v)
			}
			if d.v > 0 {
				lt[d.key] = int64(d.v / time.Second)
			}
		}
		if f.onIdle != "" {
			if f.onIdle != "pause" && f.onIdle != "terminate" {
				return sandbox.Spec{}, usagef("--on-idle %q: want pause or terminate", f.onIdle)
			}
			lt["onIdle"] = f.onIdle
		}
		raw, _ := json.Marshal(lt)
		if s.Extensions == nil {
			s.Extensions = map[string]json.RawMessage{}
		}
		s.Extensions["sandboxd.lifetime"] = raw
	}
	return s, nil
}

var capabilityNames = []string{
	"commandExecution", "fileAccess", "interactiveTerminal", "portForwarding", "pauseResume", "filesystemSnapshot",
	"memorySnapshot", "persistentVolume", "networkPolicy", "imageReference", "templateReference", "resourceLimits",
}

func (a *app) createCmd() *cobra.Command {
	var f specFlags
	var wait bool
	cmd := &cobra.Command{
		Use:   "create [flags]",
		Short: "Create a sandbox and print its id",
		Long: `Create a sandbox and print its id. The sandbox starts in the background; with --wait,
sbx waits until it is ready and fails with the reason if it fails to start.`,
		Example: `  sbx create
  id=$(sbx create --wait --cpu 500 --memory 256)
  sbx create --require pauseResume --extension acme.gpu='{"count":1}'
  sbx create --request-id deploy-42   # repeat it safely: the same sandbox comes back
  sbx create --ttl 1h --idle 10m      # terminated after an hour, paused after ten idle minutes`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, err := f.spec()
			if err != nil {
				return err
			}
			sb, err := a.create(spec, wait)
			if err != nil {
				return err
			}
			if a.json() {
				return a.writeJSON(sb)
			}
			a.printf("%s\n", sb.ID)
			return nil
		},
	}
	f.bind(cmd.Flags())
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the sandbox is ready")
	_ = cmd.RegisterFlagCompletionFunc("require", cobra.FixedCompletions(capabilityNames, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// create creates a sandbox and, with wait, waits until it is ready, with a spinner on a terminal.
func (a *app) create(spec sandbox.Spec, wait bool) (*sandbox.Sandbox, error) {
	sb, err := a.c.Create(a.ctx, spec)
	if err != nil || !wait {
		return sb, err
	}
	s := a.spin(fmt.Sprintf("waiting for %s to be ready", sb.ID))
	defer s.Stop()
	return a.c.WaitReady(a.ctx, sb.ID)
}
