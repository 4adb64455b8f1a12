package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
	"github.com/sandboxd/sandbox/provider/oci"
)

// floors measure, in this process, the cheapest things the machine can do in place of a case: os/exec
// of /bin/true, and on bundles laid out exactly as the oci provider lays them out, `runc run -d` until
// it returns, the same until the agent's first answer, `runc exec true`, and the provider's own exec of
// true without HTTP, core or store. The create and exec floors take one sample beside each sample of
// the case they are compared with (interleaved), so that both see the same machine.
type floors struct {
	prov    *oci.Provider // nil: no runc floors
	why     string        // why prov is nil
	devnull *os.File
	runtime string        // the runtime's name, in the floors' ("runc", "runsc")
	live    sandbox.Ref   // the container the runtime's exec and the provider's exec go into
	bundle  oci.RawBundle // live's

	forkExec, runD, toReady, provExec []time.Duration
	forkExecWarm                      []time.Duration // back to back, in blocks beside the exec case's
	createWall, execWall, warmWall    time.Duration
}

// newFloors prepares the floors. withRunc asks for the runc ones; when they cannot run here, f.why says
// why and only the fork/exec floor is measured.
func newFloors(ctx context.Context, withRunc bool, stateDir, agentPath string, agentArgs []string, runtime string) (*floors, error) {
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	f := &floors{devnull: devnull, runtime: runtimeName(runtime)}
	if !withRunc {
		return f, nil
	}
	if ok, why := oci.Available(); !ok {
		f.why = why
		return f, nil
	}
	p, err := oci.New(oci.Config{StateDir: stateDir, AgentPath: agentPath, AgentArgs: agentArgs, Runtime: runtime,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.why = err.Error()
		return f, nil
	}
	f.prov = p
	// The first container stays for the exec floors.
	if _, _, err := f.runcRun(ctx, false); err != nil {
		f.close(ctx)
		return nil, err
	}
	return f, nil
}

// reset forgets the samples taken, for another round beside the same container.
func (f *floors) reset() {
	f.forkExec, f.runD, f.toReady, f.provExec, f.forkExecWarm = nil, nil, nil, nil, nil
	f.createWall, f.execWall, f.warmWall = 0, 0, 0
}

func (f *floors) close(ctx context.Context) {
	if f.prov != nil {
		if f.live.ID != "" {
			if err := f.prov.Release(context.WithoutCancel(ctx), f.live); err != nil {
				slog.Error("releasing a floor container", "ref", f.live, "err", err)
			}
		}
		if err := f.prov.Close(); err != nil {
			slog.Error("closing the floors' provider", "err", err)
		}
	}
	f.devnull.Close()
}

// sampleForkExec times one os/exec of /bin/true.
func (f *floors) sampleForkExec(ctx context.Context) error {
	d, err := forkExecTrue(ctx)
	f.forkExec = append(f.forkExec, d)
	return err
}

// sampleForkExecWarm is sampleForkExec for the back-to-back series.
func (f *floors) sampleForkExecWarm(ctx context.Context) error {
	d, err := forkExecTrue(ctx)
	f.forkExecWarm = append(f.forkExecWarm, d)
	return err
}

func forkExecTrue(ctx context.Context) (time.Duration, error) {
	t := time.Now()
	if err := exec.CommandContext(ctx, "/bin/true").Run(); err != nil {
		return 0, fmt.Errorf("fork/exec floor: %w", err)
	}
	return time.Since(t), nil
}

// sampleCreate times one `runc run -d` and the agent's first answer, then releases it untimed.
func (f *floors) sampleCreate(ctx context.Context) error {
	if f.prov == nil {
		return nil
	}
	runD, toReady, err := f.runcRun(ctx, true)
	if err != nil {
		return err
	}
	f.runD, f.toReady = append(f.runD, runD), append(f.toReady, toReady)
	return nil
}

// sampleExec times one exec of true by the provider, in process.
func (f *floors) sampleExec(ctx context.Context) error {
	if f.prov == nil {
		return nil
	}
	t := time.Now()
	res, err := f.prov.Exec(ctx, f.live, sandbox.Command{Argv: []string{"true"}, Timeout: 10 * time.Second})
	if err == nil && (res.ExitCode == nil || *res.ExitCode != 0) {
		err = fmt.Errorf("exit %v", res.ExitCode)
	}
	if err != nil {
		return fmt.Errorf("provider exec: %w", err)
	}
	f.provExec = append(f.provExec, time.Since(t))
	return nil
}

// runcRun lays out a bundle with the provider's own code (oci.Provider.PrepareBundle), runs it with
// the runtime's `run -d`, and waits for the agent's answer. release: release it afterwards, untimed; otherwise it
// becomes the live container.
func (f *floors) runcRun(ctx context.Context, release bool) (runD, toReady time.Duration, err error) {
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	bun, err := f.prov.PrepareBundle(ctx, ref, sandbox.Spec{ClientRequestID: "floor"})
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if release || err != nil {
			if rerr := f.prov.Release(context.WithoutCancel(ctx), ref); rerr != nil && err == nil {
				err = rerr
			}
		} else {
			f.live, f.bundle = ref, bun
		}
	}()
	cmd := bun.Command(ctx, "run", "--detach", "--bundle", bun.Dir, bun.Name)
	cmd.Stdout, cmd.Stderr = f.devnull, f.devnull
	t0 := time.Now()
	err = cmd.Run()
	runD = time.Since(t0)
	for _, f := range bun.Files {
		f.Close()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%s run -d: %w: %s", f.runtime, err, bun.LastError())
	}
	if err := waitAgent(ctx, bun.Socket, 0); err != nil {
		return 0, 0, err
	}
	toReady = time.Since(t0)
	return runD, toReady, f.prov.AdoptBundle(ctx, ref)
}

// results are the floors measured: those sampled beside the cases, then `runc exec true`, timed here.
func (f *floors) results(ctx context.Context, b Bounds) ([]Result, error) {
	out := []Result{summarize("floor: fork/exec /bin/true", f.forkExec, f.execWall)}
	out[0].Note = "os/exec from Go, wait included; sampled beside exec true"
	r := summarize("floor: fork/exec, back to back", f.forkExecWarm, f.warmWall)
	r.Note = "the same, in blocks beside exec true, back to back"
	out = append(out, r)
	r, err := paced(ctx, "", 64, getRate, getBounds(b), func() error { return nil })
	if err != nil {
		return out, err
	}
	r.Name, r.Note = "floor: open-loop schedule", fmt.Sprintf("the open loop's 64 clients at %.0f/s with no request: the pacer's own lateness", getRate)
	out = append(out, r)
	if f.prov == nil {
		return out, nil
	}
	r = summarize(runDFloor(f.runtime), f.runD, f.createWall)
	r.Note = fmt.Sprintf("same bundle as the provider's, until %s returns; sampled beside create-to-ready", f.runtime)
	out = append(out, r)
	r = summarize(runDFloor(f.runtime)+" + agent answer", f.toReady, f.createWall)
	r.Note = "until the agent's first health answer, dialled from the host in a tight loop"
	out = append(out, r)

	r, err = sequential(ctx, "", b, func(int) error {
		cmd := f.bundle.Command(ctx, "exec", f.live.Name(), "true")
		cmd.Stdout, cmd.Stderr = f.devnull, f.devnull
		return cmd.Run()
	})
	if err != nil {
		return out, fmt.Errorf("%s exec: %w: %s", f.runtime, err, f.bundle.LastError())
	}
	r.Name, r.Note = execFloor(f.runtime), "into a running container of the same bundle"
	out = append(out, r)

	r = summarize("oci provider exec true (in-process)", f.provExec, f.execWall)
	r.Note = "agent round trip, no HTTP, core or store; sampled beside exec true"
	return append(out, r), nil
}

// waitAgent dials the agent's socket in a tight loop until it answers a health check, for at most
// within (default 10 s; a negative within tries once).
func waitAgent(ctx context.Context, socket string, within time.Duration) error {
	cl := agentclient.NewUnix(socket)
	defer cl.Close()
	if within == 0 {
		within = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, max(within, time.Second))
	defer cancel()
	once := within < 0
	for {
		hctx, hcancel := context.WithTimeout(ctx, time.Second)
		_, err := cl.Health(hctx)
		hcancel()
		if err == nil {
			return nil
		}
		if once || ctx.Err() != nil {
			return errors.Join(fmt.Errorf("agent at %s never answered", socket), err)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// runDFloor and execFloor name the runtime's create and exec floors.
func runDFloor(runtime string) string { return "floor: " + runtime + " run -d" }
func execFloor(runtime string) string { return "floor: " + runtime + " exec true" }

// runtimeName is the name the floors give the OCI runtime binary at path: its base name, "runc" when
// path is empty.
func runtimeName(path string) string {
	if path == "" {
		return "runc"
	}
	return filepath.Base(path)
}
