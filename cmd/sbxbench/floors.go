package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent"
	"github.com/sandboxd/sandbox/provider/oci"
)

// forkExecFloor times os/exec of /bin/true: the least any exec round trip can cost on this machine.
func forkExecFloor(ctx context.Context, b Bounds) (Result, error) {
	r, err := sequential(ctx, "", b, func(int) error { return exec.CommandContext(ctx, "/bin/true").Run() })
	r.Name, r.Note = "floor: fork/exec /bin/true", "os/exec from Go, wait included"
	return r, err
}

// runcFloors times the runtime binary itself on bundles laid out exactly as the oci provider lays them
// out: `runc run -d` until it returns, the same until the agent's first answer, and `runc exec true`.
// It also times the provider's exec of true in this process, without HTTP or the store.
func runcFloors(ctx context.Context, stateDir, agentPath string, agentArgs []string, b Bounds) ([]Result, error) {
	if ok, why := oci.Available(); !ok {
		return nil, fmt.Errorf("runc floors: %s", why)
	}
	p, err := oci.New(oci.Config{StateDir: stateDir, AgentPath: agentPath, AgentArgs: agentArgs,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	var refs []sandbox.Ref
	defer func() {
		for _, ref := range refs {
			if err := p.Release(context.WithoutCancel(ctx), ref); err != nil {
				slog.Error("releasing a floor container", "ref", ref, "err", err)
			}
		}
	}()
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()

	var out []Result
	var runD, toReady []time.Duration
	start := time.Now()
	for i := 0; i < b.Count && (i == 0 || time.Since(start) < b.Duration); i++ {
		ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
		bun, err := p.PrepareBundle(ctx, ref, sandbox.Spec{ClientRequestID: "floor"})
		if err != nil {
			return nil, err
		}
		refs = append(refs, ref)
		cmd := exec.CommandContext(ctx, bun.Runtime, "--root", bun.Root, "run", "-d", "--bundle", bun.Dir, bun.Name)
		cmd.Stdout, cmd.Stderr = devnull, devnull
		t0 := time.Now()
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("runc run -d: %w", err)
		}
		runD = append(runD, time.Since(t0))
		if err := waitAgent(ctx, bun.Socket); err != nil {
			return nil, err
		}
		toReady = append(toReady, time.Since(t0))
		if i > 0 && len(refs) > 1 { // keep the first one for exec; release the rest untimed
			if err := p.Release(ctx, refs[len(refs)-1]); err != nil {
				return nil, err
			}
			refs = refs[:len(refs)-1]
		}
	}
	wall := time.Since(start)
	r := summarize("floor: runc run -d", runD, wall)
	r.Note = "same bundle as the provider's, until runc returns"
	out = append(out, r)
	r = summarize("floor: runc run -d + agent answer", toReady, wall)
	r.Note = "until the agent's first health answer, dialled from the host in a tight loop"
	out = append(out, r)

	live := refs[0]
	r, err = sequential(ctx, "", b, func(int) error {
		cmd := exec.CommandContext(ctx, "runc", "--root", stateDir+"/runc", "exec", live.Name(), "true")
		cmd.Stdout, cmd.Stderr = devnull, devnull
		return cmd.Run()
	})
	if err != nil {
		return out, fmt.Errorf("runc exec: %w", err)
	}
	r.Name, r.Note = "floor: runc exec true", "into a running container of the same bundle"
	out = append(out, r)

	// The provider's own exec path, in-process: the agent round trip without HTTP, core or the store.
	cmdTrue := sandbox.Command{Argv: []string{"true"}, Timeout: 10 * time.Second}
	r, err = sequential(ctx, "", b, func(int) error {
		res, err := p.Exec(ctx, live, cmdTrue)
		if err == nil && (res.ExitCode == nil || *res.ExitCode != 0) {
			err = fmt.Errorf("exit %v", res.ExitCode)
		}
		return err
	})
	if err != nil {
		return out, fmt.Errorf("provider exec: %w", err)
	}
	r.Name, r.Note = "oci provider exec true (in-process)", "agent round trip, no HTTP, core or store"
	out = append(out, r)
	return out, nil
}

// waitAgent dials the agent's socket in a tight loop until it answers a health check.
func waitAgent(ctx context.Context, socket string) error {
	cl := agent.NewUnixClient(socket)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		hctx, hcancel := context.WithTimeout(ctx, time.Second)
		_, err := cl.Health(hctx)
		hcancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return errors.Join(fmt.Errorf("agent at %s never answered", socket), err)
		}
		time.Sleep(100 * time.Microsecond)
	}
}
