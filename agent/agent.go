// Package agent is the process that runs inside a sandbox as PID 1 (`sandboxd agent`): it reaps
// orphans, runs commands in their own process groups with a timeout and per-stream output caps, and
// reads, writes and lists files confined to the sandbox's root, over HTTP/1.1 on a unix socket.
//
// It speaks agent/protocol; the daemon's side of it is agent/agentclient. It runs the one-shot modes
// the kubernetes provider needs inside a Pod too (relay.go).
//
// Main invariant: the agent never starts work for a request whose deadline has passed, and only its
// reaper ever waits for a child, so no exit status is stolen and no zombie is left behind.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
	"github.com/sandboxd/sandbox/fsroot"
	"github.com/sandboxd/sandbox/internal/agentwire"
	"github.com/sandboxd/sandbox/internal/errhttp"
	"github.com/sandboxd/sandbox/internal/version"
	"github.com/sandboxd/sandbox/proc"
)

// Agent serves one sandbox. Build it with Main.
type Agent struct {
	root    *fsroot.Root
	workdir string
	runner  *proc.Runner // its Waiter is the agent's reaper
	log     *slog.Logger

	warm chan struct{} // closed once warmThreads is done; commands wait for it

	mu   sync.Mutex
	runs map[string]context.CancelFunc // run id -> cancels the run

	procs *Processes // background processes and their journals (process.go)

	// suspended takes the name of the socket to bind next from a suspend (suspend.go); nil on an
	// inherited socket.
	suspended chan string
	files     Files   // streamed files and watches (rawfile.go, archive.go, watch.go)
	streams   streams // terminal streams (terminal.go)
}

// Main runs the agent until ctx ends or it gets SIGTERM or SIGINT. args are the flags after the
// subcommand: -socket (required), -root (default "/"), -workdir (default "/workspace"). When args
// start with "relay" or "install", Main runs that one-shot mode instead (see relay.go).
func Main(ctx context.Context, args []string) error {
	if ok, err := subcommand(ctx, args); ok {
		return err
	}
	if os.Getenv("GOMAXPROCS") == "" {
		// The agent waits on sockets, pipes and children; it seldom computes. With one P, a request's
		// goroutines run on the thread that woke them instead of waking another for each hand-off:
		// measured with paired runs, exec round trips 3-5% faster and file transfer no slower. (The
		// oci provider sets GOMAXPROCS=1 in the agent's environment, which saves the resize.)
		runtime.GOMAXPROCS(1)
	}
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	socket := fs.String("socket", "", "unix socket to listen on")
	listenFD := fs.Int("listen-fd", -1, "inherited descriptor of a listening unix socket, instead of -socket")
	root := fs.String("root", "/", "directory file operations are confined to")
	workdir := fs.String("workdir", "/workspace", "working directory inside the root")
	nofile := fs.Uint64("nofile", 0, "lower the open files limit (soft and hard) to this before serving; 0: leave it")
	seccompFD := fs.Int("seccomp-fd", -1, "inherited descriptor of a seccomp program to install before serving (LoadFilter)")
	user := fs.String("user", "", "UID:GID[:GROUP,...] the commands run as; empty: the agent's own")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*socket == "") == (*listenFD < 0) || fs.NArg() != 0 {
		return errors.New("agent: usage: agent {-socket PATH | -listen-fd N} [-root DIR] [-workdir DIR]")
	}
	if *nofile > 0 {
		lim := unix.Rlimit{Cur: *nofile, Max: *nofile}
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			return fmt.Errorf("agent: open files limit %d: %w", *nofile, err)
		}
	}
	// Nothing in the sandbox may trace the agent or take its descriptors (pidfd_getfd, /proc/1/fd): the
	// listening socket and the files it writes to are the daemon's. A process that is not dumpable is
	// out of reach of every process without CAP_SYS_PTRACE, which no sandbox has.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("agent: make the agent non-dumpable: %w", err)
	}
	if *seccompFD >= 0 {
		if err := LoadFilter(*seccompFD); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
	}
	// What the agent writes of itself goes to a file of the daemon's (the oci provider's agent.log): at
	// most maxLogBytes of it, whatever a sandbox makes it say.
	logOut := &cappedWriter{w: os.Stderr, left: maxLogBytes}
	log := slog.New(slog.NewTextHandler(logOut, nil)).With("component", "agent")

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if os.Getpid() != 1 {
		// Not PID 1 (tests, or a host run): adopt the orphans of our commands all the same.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("agent: become a subreaper: %w", err)
		}
	}
	cred, err := parseUser(*user)
	if err != nil {
		return fmt.Errorf("agent: -user: %w", err)
	}
	r, err := fsroot.Open(*root, *workdir)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	defer r.Close()
	reaper := proc.NewReaper()
	defer reaper.Stop()
	a := &Agent{
		root:    r,
		workdir: *workdir,
		runner:  newRunner(reaper, cred),
		log:     log,
		runs:    make(map[string]context.CancelFunc),
		warm:    make(chan struct{}),
		procs:   &Processes{},
	}
	// Health answers at once; the first command waits for the threads.
	go func() {
		warmThreads(8)
		close(a.warm)
	}()

	if *socket != "" {
		a.suspended = make(chan string, 1)
	}
	wake := make(chan os.Signal, 1)
	signal.Notify(wake, syscall.SIGUSR2)
	defer signal.Stop(wake)
	for {
		ln, err := listen(*socket, *listenFD)
		if err != nil {
			return fmt.Errorf("agent: listen: %w", err)
		}
		if ul, ok := ln.(*net.UnixListener); ok {
			if a.suspended != nil {
				ul.SetUnlinkOnClose(false) // a suspend leaves its file for gVisor's restore (suspend.go)
			}
			ln = handoverListener{ul} // relays hand their descriptors over (handover.go)
		}
		srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 30 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		log.Info("agent listening", "socket", ln.Addr().String(), "pid", os.Getpid())
		select {
		case <-ctx.Done():
			a.streams.endAll(protocol.TerminalAgentStopping, "the agent is stopping")
			srv.Close() // cancels every running command through its request context
			return nil
		case err := <-served:
			return fmt.Errorf("agent: serve: %w", err)
		case next := <-a.suspended:
			a.streams.endAll(protocol.TerminalSuspended, "the agent suspends its server")
			if *socket, err = suspendServer(ctx, srv, *socket, next, wake); err != nil {
				return nil // ctx ended while suspended
			}
		}
	}
}

// maxLogBytes bounds what the agent writes of itself over its life.
const maxLogBytes = 64 << 10

// cappedWriter passes on writes until left bytes have gone, and drops the rest.
type cappedWriter struct {
	mu   sync.Mutex
	w    io.Writer
	left int
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(p) > c.left {
		if c.left > 0 {
			c.w.Write([]byte("agent: log limit reached; what follows is dropped\n"))
		}
		c.left = 0
		return len(p), nil
	}
	c.left -= len(p)
	return c.w.Write(p)
}

// listen listens on socket, or takes over the listening socket inherited as descriptor fd (the oci
// provider binds it on the host before the container starts, so its first request waits in the
// socket's backlog for the agent instead of polling for the socket to appear).
func listen(socket string, fd int) (net.Listener, error) {
	if fd >= 0 {
		f := os.NewFile(uintptr(fd), "listener")
		if f == nil {
			return nil, fmt.Errorf("descriptor %d is not open", fd)
		}
		defer f.Close() // FileListener holds a duplicate
		ln, err := net.FileListener(f)
		if err != nil {
			return nil, fmt.Errorf("descriptor %d: %w", fd, err)
		}
		if _, ok := ln.(*net.UnixListener); !ok {
			ln.Close()
			return nil, fmt.Errorf("descriptor %d is not a unix socket", fd)
		}
		return ln, nil
	}
	_ = os.Remove(socket) // a stale socket of an earlier run
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// warmThreads makes the Go runtime create n OS threads now and keep them idle. Threads count against
// the sandbox's pids limit: a fork bomb that exhausts it must not leave the agent unable to make the
// thread it needs, which would crash it.
func warmThreads(n int) {
	// Each goroutine locks itself to a thread and blocks until all n are locked: a goroutine blocked
	// while locked keeps its thread, so the scheduler starts a new one for the next at once. Unlocked
	// before they return, the threads stay in the runtime's idle pool.
	var locked, done sync.WaitGroup
	release := make(chan struct{})
	locked.Add(n)
	done.Add(n)
	for i := 0; i < n; i++ {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			locked.Done()
			<-release
		}()
	}
	locked.Wait()
	close(release)
	done.Wait()
}

// Handler returns the agent's HTTP handler.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+protocol.PathHealth, a.health)
	mux.HandleFunc("POST "+protocol.PathExec, a.exec)
	mux.HandleFunc("POST "+protocol.PathCancel, a.cancel)
	mux.HandleFunc("GET "+protocol.PathFile, a.readFile)
	mux.HandleFunc("PUT "+protocol.PathFile, a.writeFile)
	mux.HandleFunc("GET "+protocol.PathList, a.list)
	mux.HandleFunc("POST "+protocol.PathProcesses, a.startProcess)
	mux.HandleFunc("GET "+protocol.PathProcesses, a.listProcesses)
	mux.HandleFunc("GET "+protocol.PathProcess, a.getProcess)
	mux.HandleFunc("GET "+protocol.PathProcessOutput, a.processOutput)
	mux.HandleFunc("POST "+protocol.PathProcessStdin, a.processStdin)
	mux.HandleFunc("POST "+protocol.PathProcessSignal, a.signalProcess)
	mux.HandleFunc("POST "+protocol.PathSuspend, a.suspend)
	mux.HandleFunc("POST "+protocol.PathProcessResize, a.resizeProcess)
	mux.HandleFunc("PUT "+protocol.PathRawFile, a.putRawFile)
	mux.HandleFunc("GET "+protocol.PathRawFile, a.getRawFile)
	mux.HandleFunc("GET "+protocol.PathUpload, a.uploadState)
	mux.HandleFunc("PUT "+protocol.PathArchive, a.putArchive)
	mux.HandleFunc("GET "+protocol.PathArchive, a.getArchive)
	mux.HandleFunc("GET "+protocol.PathWatch, a.watch)
	mux.HandleFunc("GET "+protocol.PathPort, a.dialPort)
	mux.HandleFunc("GET "+protocol.PathProcessTerminal, a.attachTerminal)
	return mux
}

func (a *Agent) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, protocol.Health{OK: true, Protocol: protocol.Version, Version: version.Version, PID: os.Getpid()})
}

func (a *Agent) exec(w http.ResponseWriter, r *http.Request) {
	var req protocol.ExecRequest
	if err := decode(r, &req); err != nil {
		writeErr(w, err)
		return
	}
	switch {
	case len(req.Argv) == 0:
		writeErr(w, fmt.Errorf("argv is empty: %w", sandbox.ErrInvalidRequest))
		return
	case req.TimeoutMs <= 0 || req.TimeoutMs > sandbox.MaxCommandTimeout.Milliseconds():
		writeErr(w, fmt.Errorf("timeoutMs %d out of range: %w", req.TimeoutMs, sandbox.ErrInvalidRequest))
		return
	case req.MaxOutputBytes <= 0 || req.MaxOutputBytes > sandbox.MaxMaxOutputBytes:
		writeErr(w, fmt.Errorf("maxOutputBytes %d out of range: %w", req.MaxOutputBytes, sandbox.ErrInvalidRequest))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if req.ID != "" {
		a.mu.Lock()
		_, dup := a.runs[req.ID]
		if !dup {
			a.runs[req.ID] = cancel
		}
		a.mu.Unlock()
		if dup {
			writeErr(w, fmt.Errorf("run %q already exists: %w", req.ID, sandbox.ErrInvalidRequest))
			return
		}
		defer func() {
			a.mu.Lock()
			delete(a.runs, req.ID)
			a.mu.Unlock()
		}()
	}
	// Checked last, right before the fork: the queue before this point is where a pause leaves requests.
	if !a.readyToFork(w, r) {
		return
	}
	res := a.run(ctx, req)
	if r.Header.Get("Accept") == agentwire.MediaType {
		writeExecResult(w, res)
		return
	}
	writeJSON(w, http.StatusOK, protocol.ExecResult{ExecStatus: res.ExecStatus, Stdout: []byte(res.Stdout), Stderr: []byte(res.Stderr)})
}

// readyToFork waits for the agent's threads (warmThreads), then checks the request's deadline; false
// when the request must not start a process (answered, or its caller gone).
func (a *Agent) readyToFork(w http.ResponseWriter, r *http.Request) bool {
	if a.warm != nil {
		select {
		case <-a.warm:
		case <-r.Context().Done():
			return false
		}
	}
	return checkDeadline(w, r)
}

// writeExecResult answers res in the compact form (agentwire).
func writeExecResult(w http.ResponseWriter, res protocol.ExecOutput) {
	parts, err := agentwire.Encode(res)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, protocol.Error{Code: string(sandbox.CodeInternal), Message: "encoding the answer failed"})
		return
	}
	w.Header().Set("Content-Type", agentwire.MediaType)
	w.Header().Set("Content-Length", strconv.Itoa(len(parts[0])+len(parts[1])+len(parts[2])))
	w.WriteHeader(http.StatusOK)
	for _, b := range parts {
		if _, err := io.WriteString(w, b); err != nil {
			return
		}
	}
}

func (a *Agent) cancel(w http.ResponseWriter, r *http.Request) {
	var req protocol.CancelRequest
	if err := decode(r, &req); err != nil {
		writeErr(w, err)
		return
	}
	a.mu.Lock()
	if cancel, ok := a.runs[req.ID]; ok {
		cancel()
		delete(a.runs, req.ID)
	}
	a.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (a *Agent) readFile(w http.ResponseWriter, r *http.Request) {
	if !checkDeadline(w, r) {
		return
	}
	data, err := a.root.ReadFile(r.URL.Query().Get("path"), sandbox.MaxFileBytes)
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

func (a *Agent) writeFile(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, sandbox.MaxFileBytes))
	if err != nil {
		writeErr(w, fmt.Errorf("body: %v: %w", err, sandbox.ErrRequestTooLarge))
		return
	}
	if !checkDeadline(w, r) {
		return
	}
	if err := a.root.WriteFile(r.URL.Query().Get("path"), data); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// list answers a listing of at most protocol.MaxListEntries entries and protocol.MaxListBytes, or
// refuses it with ErrInvalidRequest: the API has no pages, and a larger one could not be answered.
func (a *Agent) list(w http.ResponseWriter, r *http.Request) {
	if !checkDeadline(w, r) {
		return
	}
	p := r.URL.Query().Get("path")
	entries, err := a.root.List(p)
	if err != nil {
		writeErr(w, err)
		return
	}
	if len(entries) > protocol.MaxListEntries {
		writeErr(w, fmt.Errorf("list %q: directory has more than %d entries: %w", p, protocol.MaxListEntries, sandbox.ErrInvalidRequest))
		return
	}
	if entries == nil {
		entries = []sandbox.FileEntry{}
	}
	body, err := json.Marshal(entries)
	if err != nil {
		writeErr(w, err)
		return
	}
	if len(body) > protocol.MaxListBytes {
		writeErr(w, fmt.Errorf("list %q: listing of %d entries is %d bytes, past the limit of %d: %w",
			p, len(entries), len(body), protocol.MaxListBytes, sandbox.ErrInvalidRequest))
		return
	}
	writeJSON(w, http.StatusOK, json.RawMessage(body))
}

// checkDeadline answers 504 with protocol.CodeDeadline and returns false when the request's deadline
// is missing, malformed or past.
func checkDeadline(w http.ResponseWriter, r *http.Request) bool {
	ns, err := strconv.ParseInt(r.Header.Get(protocol.HeaderDeadline), 10, 64)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, protocol.Error{Code: string(sandbox.CodeInvalidRequest), Message: "missing or malformed " + protocol.HeaderDeadline})
		return false
	}
	if late := time.Since(time.Unix(0, ns)); late > 0 {
		writeJSON(w, http.StatusGatewayTimeout, protocol.Error{Code: protocol.CodeDeadline, Message: fmt.Sprintf("request arrived %v past its deadline", late)})
		return false
	}
	return true
}

func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, protocol.MaxExecRequestBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("request body: %v: %w", err, sandbox.ErrInvalidRequest)
	}
	return nil
}

// clientErrnos are failures of a request the sandbox cannot honour (a full disk, a read-only path):
// the caller's to fix, not a broken agent.
var clientErrnos = []error{unix.ENOSPC, unix.EDQUOT, unix.EROFS, unix.EACCES, unix.EPERM, unix.EFBIG}

func writeErr(w http.ResponseWriter, err error) {
	if sandbox.ClassOf(err).Err == nil {
		for _, e := range clientErrnos {
			if errors.Is(err, e) {
				err = fmt.Errorf("%w: %w", err, sandbox.ErrInvalidRequest)
				break
			}
		}
	}
	c := sandbox.ClassOf(err)
	writeJSON(w, errhttp.Status(c.Code), protocol.Error{Code: string(c.Code), Message: err.Error()})
}

// jsonLine is v in JSON and a newline.
func jsonLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	return append(b, '\n'), err
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"code":"internal","message":"encoding the answer failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
