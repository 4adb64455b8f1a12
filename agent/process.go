package agent

import (
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

// processes is the agent's table of background processes, by pid. The journals live in dir, made on
// the first start (so that an agent that never starts one writes nothing).
type processes struct {
	journalBytes int64
	baseDir      string // where dir is made; "" is os.TempDir()

	mu    sync.Mutex
	dir   string
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

func (ps *processes) journalDir() (string, error) {
	if ps.dir != "" {
		return ps.dir, nil
	}
	d, err := os.MkdirTemp(ps.baseDir, ".sandboxd-journals-")
	if err != nil {
		return "", err
	}
	ps.dir = d
	return d, nil
}

// admit makes room in the table for one more process: the oldest exited one is forgotten when it is
// full. The caller holds ps.mu.
func (ps *processes) admit() error {
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
	ps := &a.procs
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if err := ps.admit(); err != nil {
		writeErr(w, err)
		return
	}
	jdir, err := ps.journalDir()
	if err != nil {
		writeErr(w, fmt.Errorf("journal directory: %w", err))
		return
	}
	j, err := newJournal(jdir, ps.journalBytes)
	if err != nil {
		writeErr(w, fmt.Errorf("journal: %w", err))
		return
	}
	sp, err := a.runner.Spawn(dir, req.Argv, req.Env)
	if err != nil {
		j.release()
		writeErr(w, err)
		return
	}
	p := &process{j: j, sp: sp, stdin: sp.Stdin, done: make(chan struct{}), info: protocol.ProcessInfo{
		PID: sp.PID, Tag: req.Tag, Argv: req.Argv, Cwd: cwd, Running: true, StartedAt: time.Now().UTC(),
	}}
	if old, ok := ps.table[sp.PID]; ok { // an exited process whose pid came round again
		old.j.release()
	}
	if ps.table == nil {
		ps.table = make(map[int]*process)
	}
	ps.table[sp.PID] = p
	go p.pump()
	if len(req.Stdin) > 0 || req.CloseStdin {
		go func() {
			_ = p.writeStdin(req.Stdin, req.CloseStdin, time.Now().Add(protocol.MaxWait))
		}()
	}
	writeJSON(w, http.StatusOK, p.snapshot())
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
		p.stdin.Close()
		p.stdin = nil
	}
	return nil
}

// lookup returns the process of the request's pid parameter.
func (a *Agent) lookup(pidParam string) (*process, error) {
	pid, err := strconv.Atoi(pidParam)
	if err != nil || pid <= 0 {
		return nil, fmt.Errorf("pid %.32q: %w", pidParam, sandbox.ErrInvalidRequest)
	}
	a.procs.mu.Lock()
	p, ok := a.procs.table[pid]
	a.procs.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("no process %d: %w", pid, sandbox.ErrNotFound)
	}
	return p, nil
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
	a.procs.mu.Lock()
	list := make([]*process, 0, len(a.procs.table))
	for _, p := range a.procs.table {
		list = append(list, p)
	}
	a.procs.mu.Unlock()
	out := make([]protocol.ProcessInfo, 0, len(list))
	for _, p := range list {
		out = append(out, p.snapshot())
	}
	slices.SortFunc(out, func(x, y protocol.ProcessInfo) int { return x.StartedAt.Compare(y.StartedAt) })
	writeJSON(w, http.StatusOK, out)
}

func (a *Agent) getProcess(w http.ResponseWriter, r *http.Request) {
	if !checkDeadline(w, r) {
		return
	}
	p, err := a.lookup(r.URL.Query().Get("pid"))
	if err == nil {
		var wait time.Duration
		if wait, err = waitParam(r); err == nil && wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-p.done:
			case <-t.C:
			case <-r.Context().Done():
			}
			t.Stop()
		}
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p.snapshot())
}

func (a *Agent) processOutput(w http.ResponseWriter, r *http.Request) {
	if !checkDeadline(w, r) {
		return
	}
	q := r.URL.Query()
	p, err := a.lookup(q.Get("pid"))
	if err != nil {
		writeErr(w, err)
		return
	}
	after, err := strconv.ParseInt(q.Get("after"), 10, 64)
	if err != nil {
		writeErr(w, fmt.Errorf("after %.32q: %w", q.Get("after"), sandbox.ErrInvalidRequest))
		return
	}
	maxBytes, err := strconv.Atoi(q.Get("max"))
	if err != nil || maxBytes <= 0 || maxBytes > protocol.MaxOutputChunk {
		writeErr(w, fmt.Errorf("max %.32q: %w", q.Get("max"), sandbox.ErrInvalidRequest))
		return
	}
	wait, err := waitParam(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	start, data, end, done, err := p.j.read(ctx, after, maxBytes)
	if err != nil {
		writeErr(w, err)
		return
	}
	oldest, _, _, _ := p.j.bounds()
	head, err := jsonLine(protocol.OutputHead{Start: start, Length: len(data), End: end, Oldest: min(oldest, start), Done: done})
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Content-Type", protocol.OutputMediaType)
	w.Header().Set("Content-Length", strconv.Itoa(len(head)+len(data)))
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(head); err == nil {
		_, _ = w.Write(data)
	}
}

func (a *Agent) processStdin(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, err := a.lookup(q.Get("pid"))
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
	if err := p.writeStdin(data, q.Get("close") == "1", deadline); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// signalNumbers are the signals of protocol.Signals.
var signalNumbers = map[string]unix.Signal{
	"HUP": unix.SIGHUP, "INT": unix.SIGINT, "QUIT": unix.SIGQUIT, "KILL": unix.SIGKILL, "USR1": unix.SIGUSR1,
	"USR2": unix.SIGUSR2, "TERM": unix.SIGTERM, "CONT": unix.SIGCONT, "STOP": unix.SIGSTOP, "WINCH": unix.SIGWINCH,
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
	sig, ok := signalNumbers[req.Signal]
	if !ok {
		writeErr(w, fmt.Errorf("signal %.16q is none of %v: %w", req.Signal, protocol.Signals, sandbox.ErrInvalidRequest))
		return
	}
	p, err := a.lookup(strconv.Itoa(req.PID))
	if err != nil {
		writeErr(w, err)
		return
	}
	select {
	case <-p.sp.Done: // its pid may be another process's by now
		writeErr(w, fmt.Errorf("process %d has exited: %w", req.PID, sandbox.ErrInvalidState))
		return
	default:
	}
	// The group's leader is not reaped until Done, so the group is still the process's.
	if err := unix.Kill(-req.PID, sig); err != nil && err != unix.ESRCH {
		writeErr(w, fmt.Errorf("signal %s to %d: %w", req.Signal, req.PID, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
