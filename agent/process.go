package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
	"github.com/sandboxd/sandbox/proc"
)

// Processes is a table of background processes, by pid, and their output journals: the agent's, and
// the host provider's (which runs the agent's code in the daemon). The journals are files without a
// name on the file system of JournalDir (newJournal). The zero value is ready to use.
type Processes struct {
	JournalBytes int64  // how much of each process's output is kept; zero: protocol.JournalBytes
	JournalDir   string // whose file system holds the journals; "": os.TempDir()

	mu    sync.Mutex
	table map[int]*process
}

// process is one background process: its info (under mu), its journal, its stdin.
type process struct {
	j  *journal
	sp *proc.Spawned

	stdinMu sync.Mutex
	stdin   *os.File // nil once closed

	mu   sync.Mutex
	info protocol.ProcessInfo
	done chan struct{} // closed when the process exited and its output is closed
}

// admit makes room in the table for one more process: the oldest exited one is forgotten when it is
// full. The caller holds ps.mu.
func (ps *Processes) admit() error {
	if len(ps.table) < protocol.MaxProcesses {
		return nil
	}
	var oldest *process
	for _, p := range ps.table {
		select {
		case <-p.done:
			if oldest == nil || p.info.StartedAt.Before(oldest.info.StartedAt) {
				oldest = p
			}
		default:
		}
	}
	if oldest == nil {
		return fmt.Errorf("%d processes are running, the most the agent keeps: %w", protocol.MaxProcesses, sandbox.ErrInvalidRequest)
	}
	delete(ps.table, oldest.info.PID)
	oldest.j.release()
	return nil
}

func (a *Agent) startProcess(w http.ResponseWriter, r *http.Request) {
	var req protocol.ProcessStart
	if err := decode(r, &req); err != nil {
		writeErr(w, err)
		return
	}
	if err := req.Validate(); err != nil {
		writeErr(w, err)
		return
	}
	if !a.readyToFork(w, r) {
		return
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = a.workdir
	}
	dir, err := a.root.ResolveDir(cwd)
	if err != nil {
		writeErr(w, fmt.Errorf("cwd %q: %w", req.Cwd, err))
		return
	}
	req.Cwd = cwd
	// The journals go on the sandbox's own disk, the working directory's: counted against its size,
	// and not in the small memory-backed /tmp the sandbox's programs use.
	journals, err := a.root.ResolveDir(a.workdir)
	if err != nil {
		writeErr(w, fmt.Errorf("journal directory: %w", err))
		return
	}
	p, err := a.procs.Start(a.runner, dir, journals, req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// Start starts spec in dir, the directory spec.Cwd names (resolved by the caller), through runner, its
// journal on the file system of journals ("": JournalDir). Errors: those of proc.Runner.Spawn;
// ErrInvalidRequest when MaxProcesses are running.
func (ps *Processes) Start(runner *proc.Runner, dir, journals string, spec sandbox.ProcessSpec) (sandbox.Process, error) {
	if err := spec.Validate(); err != nil {
		return sandbox.Process{}, err
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if err := ps.admit(); err != nil {
		return sandbox.Process{}, err
	}
	jdir := cmp.Or(journals, ps.JournalDir, os.TempDir())
	size := ps.JournalBytes
	if size <= 0 {
		size = protocol.JournalBytes
	}
	j, err := newJournal(jdir, size)
	if err != nil {
		return sandbox.Process{}, fmt.Errorf("journal: %w", err)
	}
	sp, err := spawn(runner, dir, spec)
	if err != nil {
		j.release()
		return sandbox.Process{}, err
	}
	p := &process{j: j, sp: sp, stdin: sp.Stdin, done: make(chan struct{}), info: sandbox.Process{
		PID: sp.PID, Tag: spec.Tag, Argv: spec.Argv, Cwd: spec.Cwd, Running: true, StartedAt: time.Now().UTC(), PTY: sp.TTY,
	}}
	if old, ok := ps.table[sp.PID]; ok { // an exited process whose pid came round again
		old.j.release()
	}
	if ps.table == nil {
		ps.table = make(map[int]*process)
	}
	ps.table[sp.PID] = p
	go p.pump()
	if len(spec.Stdin) > 0 || spec.CloseStdin {
		// Taken before the answer, so that stdin written after it (WriteStdin) waits for the start's
		// to be written first: a client's bytes reach the process in the order it sent them.
		p.stdinMu.Lock()
		go func() {
			defer p.stdinMu.Unlock()
			_ = p.writeStdinLocked(spec.Stdin, spec.CloseStdin, time.Now().Add(protocol.MaxWait))
		}()
	}
	return p.snapshot(), nil
}

// Close forgets every process and removes the journals. The processes are the runner's to kill.
func (ps *Processes) Close() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for pid, p := range ps.table {
		p.j.release()
		delete(ps.table, pid)
	}
}

// pump copies the process's output into its journal until the pipe ends, or until drainGrace after
// the process exited (a process that left the group may hold the pipe), then records its end.
func (p *process) pump() {
	go func() {
		<-p.sp.Done
		_ = p.sp.Output.SetReadDeadline(time.Now().Add(drainGrace))
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := p.sp.Output.Read(buf)
		p.j.append(buf[:n])
		if err != nil {
			break
		}
	}
	p.sp.Output.Close()
	<-p.sp.Done
	p.stdinMu.Lock()
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
	p.stdinMu.Unlock()
	code := proc.ExitCode(p.sp.Status)
	now := time.Now().UTC()
	p.mu.Lock()
	p.info.Running, p.info.ExitCode, p.info.FinishedAt = false, &code, &now
	p.mu.Unlock()
	p.j.close()
	close(p.done)
}

func (p *process) snapshot() protocol.ProcessInfo {
	p.mu.Lock()
	info := p.info
	p.mu.Unlock()
	var failed error
	info.OutputOldest, info.OutputEnd, _, failed = p.j.bounds()
	if failed != nil {
		info.OutputError = failed.Error()
	}
	return info
}

// writeStdin writes data to the process's stdin by deadline, and closes it after when closeIt.
func (p *process) writeStdin(data []byte, closeIt bool, deadline time.Time) error {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	return p.writeStdinLocked(data, closeIt, deadline)
}

// writeStdinLocked is writeStdin for a caller that holds stdinMu.
func (p *process) writeStdinLocked(data []byte, closeIt bool, deadline time.Time) error {
	if p.stdin == nil {
		if len(data) == 0 && closeIt {
			return nil
		}
		return fmt.Errorf("process %d: stdin is closed: %w", p.info.PID, sandbox.ErrInvalidState)
	}
	if len(data) > 0 {
		_ = p.stdin.SetWriteDeadline(deadline)
		if _, err := p.stdin.Write(data); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("process %d does not read its stdin: %w", p.info.PID, sandbox.ErrInvalidState)
			}
			return fmt.Errorf("process %d: stdin: %v: %w", p.info.PID, err, sandbox.ErrInvalidState)
		}
	}
	if closeIt {
		if p.sp.TTY {
			// A terminal has no end of its own to close: its end-of-file key says it to the reader.
			_ = p.stdin.SetWriteDeadline(deadline)
			_, _ = p.stdin.Write([]byte{eofKey})
		}
		p.stdin.Close()
		p.stdin = nil
	}
	return nil
}

// lookup returns the process pid.
func (ps *Processes) lookup(pid int) (*process, error) {
	ps.mu.Lock()
	p, ok := ps.table[pid]
	ps.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("no process %d: %w", pid, sandbox.ErrNotFound)
	}
	return p, nil
}

// List returns every process, oldest first.
func (ps *Processes) List() []sandbox.Process {
	ps.mu.Lock()
	list := make([]*process, 0, len(ps.table))
	for _, p := range ps.table {
		list = append(list, p)
	}
	ps.mu.Unlock()
	out := make([]sandbox.Process, 0, len(list))
	for _, p := range list {
		out = append(out, p.snapshot())
	}
	slices.SortFunc(out, func(x, y sandbox.Process) int { return x.StartedAt.Compare(y.StartedAt) })
	return out
}

// Wait returns process pid once it has ended, or as it is after wait or when ctx ends.
func (ps *Processes) Wait(ctx context.Context, pid int, wait time.Duration) (sandbox.Process, error) {
	p, err := ps.lookup(pid)
	if err != nil {
		return sandbox.Process{}, err
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-p.done:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	return p.snapshot(), nil
}

// Read returns up to max bytes of process pid's output from offset after (or from the oldest kept),
// waiting up to wait, or until ctx ends, for one when there is none yet.
func (ps *Processes) Read(ctx context.Context, pid int, after int64, max int, wait time.Duration) (sandbox.OutputChunk, error) {
	p, err := ps.lookup(pid)
	if err != nil {
		return sandbox.OutputChunk{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	start, data, end, done, err := p.j.read(ctx, after, max)
	if err != nil {
		return sandbox.OutputChunk{}, err
	}
	oldest, _, _, _ := p.j.bounds()
	return sandbox.OutputChunk{Start: start, Data: data, End: end, Oldest: min(oldest, start), Done: done}, nil
}

// Stdin writes data to process pid's stdin by deadline, and closes it after when closeIt.
func (ps *Processes) Stdin(pid int, data []byte, closeIt bool, deadline time.Time) error {
	p, err := ps.lookup(pid)
	if err != nil {
		return err
	}
	return p.writeStdin(data, closeIt, deadline)
}

// signalNumbers are the signals of sandbox.ProcessSignals.
var signalNumbers = map[string]unix.Signal{
	"HUP": unix.SIGHUP, "INT": unix.SIGINT, "QUIT": unix.SIGQUIT, "KILL": unix.SIGKILL, "USR1": unix.SIGUSR1,
	"USR2": unix.SIGUSR2, "TERM": unix.SIGTERM, "CONT": unix.SIGCONT, "STOP": unix.SIGSTOP, "WINCH": unix.SIGWINCH,
}

// Signal sends signal (one of sandbox.ProcessSignals) to process pid's group. A process that has
// ended is ErrInvalidState: its pid may be another's by now.
func (ps *Processes) Signal(pid int, signal string) error {
	sig, ok := signalNumbers[signal]
	if !ok {
		return fmt.Errorf("signal %.16q is none of %v: %w", signal, sandbox.ProcessSignals, sandbox.ErrInvalidRequest)
	}
	p, err := ps.lookup(pid)
	if err != nil {
		return err
	}
	select {
	case <-p.sp.Done:
		return fmt.Errorf("process %d has exited: %w", pid, sandbox.ErrInvalidState)
	default:
	}
	// The group's leader is not reaped before Done, so the group is still the process's.
	if err := unix.Kill(-pid, sig); err != nil && err != unix.ESRCH {
		return fmt.Errorf("signal %s to %d: %w", signal, pid, err)
	}
	return nil
}

// pidParam reads the request's pid parameter.
func pidParam(r *http.Request) (int, error) {
	s := r.URL.Query().Get("pid")
	pid, err := strconv.Atoi(s)
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid %.32q: %w", s, sandbox.ErrInvalidRequest)
	}
	return pid, nil
}

// waitParam reads waitMs, bounded by protocol.MaxWait and by the request's deadline.
func waitParam(r *http.Request) (time.Duration, error) {
	s := r.URL.Query().Get("waitMs")
	if s == "" {
		return 0, nil
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms < 0 || time.Duration(ms)*time.Millisecond > protocol.MaxWait {
		return 0, fmt.Errorf("waitMs %.32q: %w", s, sandbox.ErrInvalidRequest)
	}
	d := time.Duration(ms) * time.Millisecond
	if ns, err := strconv.ParseInt(r.Header.Get(protocol.HeaderDeadline), 10, 64); err == nil {
		// Answer a little before the caller gives up, so the answer is not lost on the way.
		d = min(d, time.Until(time.Unix(0, ns))*9/10)
	}
	return max(d, 0), nil
}

func (a *Agent) listProcesses(w http.ResponseWriter, r *http.Request) {
	if !checkDeadline(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, a.procs.List())
}

func (a *Agent) getProcess(w http.ResponseWriter, r *http.Request) {
	if !checkDeadline(w, r) {
		return
	}
	pid, err := pidParam(r)
	var wait time.Duration
	if err == nil {
		wait, err = waitParam(r)
	}
	var p sandbox.Process
	if err == nil {
		p, err = a.procs.Wait(r.Context(), pid, wait)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (a *Agent) processOutput(w http.ResponseWriter, r *http.Request) {
	if !checkDeadline(w, r) {
		return
	}
	out, err := a.readOutput(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	head, err := jsonLine(protocol.OutputHead{Start: out.Start, Length: len(out.Data), End: out.End, Oldest: out.Oldest, Done: out.Done})
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Content-Type", protocol.OutputMediaType)
	w.Header().Set("Content-Length", strconv.Itoa(len(head)+len(out.Data)))
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(head); err == nil {
		_, _ = w.Write(out.Data)
	}
}

// readOutput reads what the request to PathProcessOutput asks for.
func (a *Agent) readOutput(r *http.Request) (sandbox.OutputChunk, error) {
	q := r.URL.Query()
	pid, err := pidParam(r)
	if err != nil {
		return sandbox.OutputChunk{}, err
	}
	after, err := strconv.ParseInt(q.Get("after"), 10, 64)
	if err != nil {
		return sandbox.OutputChunk{}, fmt.Errorf("after %.32q: %w", q.Get("after"), sandbox.ErrInvalidRequest)
	}
	maxBytes, err := strconv.Atoi(q.Get("max"))
	if err != nil || maxBytes <= 0 || maxBytes > protocol.MaxOutputChunk {
		return sandbox.OutputChunk{}, fmt.Errorf("max %.32q: %w", q.Get("max"), sandbox.ErrInvalidRequest)
	}
	wait, err := waitParam(r)
	if err != nil {
		return sandbox.OutputChunk{}, err
	}
	return a.procs.Read(r.Context(), pid, after, maxBytes, wait)
}

func (a *Agent) processStdin(w http.ResponseWriter, r *http.Request) {
	pid, err := pidParam(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, protocol.MaxStdinBytes))
	if err != nil {
		writeErr(w, fmt.Errorf("body: %v: %w", err, sandbox.ErrRequestTooLarge))
		return
	}
	if !checkDeadline(w, r) {
		return
	}
	deadline := time.Now().Add(protocol.MaxWait)
	if ns, err := strconv.ParseInt(r.Header.Get(protocol.HeaderDeadline), 10, 64); err == nil {
		deadline = time.Unix(0, ns)
	}
	if err := a.procs.Stdin(pid, data, r.URL.Query().Get("close") == "1", deadline); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *Agent) signalProcess(w http.ResponseWriter, r *http.Request) {
	var req protocol.ProcessSignal
	if err := decode(r, &req); err != nil {
		writeErr(w, err)
		return
	}
	if !checkDeadline(w, r) {
		return
	}
	if err := a.procs.Signal(req.PID, req.Signal); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
