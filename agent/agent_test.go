package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
	"github.com/sandboxd/sandbox/agent/protocol"
	"github.com/sandboxd/sandbox/internal/errhttp"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/version"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type running struct {
	root   string // the agent's root directory
	socket string
	pid    int
	c      *agentclient.Client
}

// start runs the agent binary on the host with a temporary root.
func start(t testing.TB) *running {
	t.Helper()
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "workspace"), 0o755); err != nil {
		t.Fatal(err)
	}
	sockDir, err := os.MkdirTemp("", "ag")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "a.sock")
	cmd := exec.Command(testenv.BuildAgent(t), "agent", "-socket", sock, "-root", root, "-workdir", "/workspace")
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1") // as the oci provider starts it
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	c := agentclient.NewUnix(sock)
	t.Cleanup(c.Close)
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Health(ctx)
		cancel()
		if err == nil {
			break
		}
		if i > 500 {
			t.Fatalf("agent never answered: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return &running{root: root, socket: sock, pid: cmd.Process.Pid, c: c}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func run(t *testing.T, a *running, argv ...string) protocol.ExecOutput {
	t.Helper()
	res, err := a.c.Exec(ctx(t), protocol.ExecRequest{Argv: argv, TimeoutMs: 20000, MaxOutputBytes: 1 << 20})
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	return res
}

func exitOf(t *testing.T, r protocol.ExecOutput) int {
	t.Helper()
	if r.ExitCode == nil {
		t.Fatalf("no exit code: %+v", r)
	}
	return *r.ExitCode
}

// TestHealthSaysTheVersion: the agent reports the build's version, the daemon's and the manifests' own.
func TestHealthSaysTheVersion(t *testing.T) {
	a := start(t)
	h, err := a.c.Health(ctx(t))
	if err != nil || h.Version != version.Version || h.PID != a.pid || h.Protocol != protocol.Version {
		t.Fatalf("health %+v, %v; want version %q, protocol %d and pid %d", h, err, version.Version, protocol.Version, a.pid)
	}
}

func TestExec(t *testing.T) {
	a := start(t)
	r := run(t, a, "echo", "hello")
	if exitOf(t, r) != 0 || string(r.Stdout) != "hello\n" || len(r.Stderr) != 0 {
		t.Fatalf("echo: %+v", r)
	}
	if r := run(t, a, "sh", "-c", "echo oops >&2; exit 3"); exitOf(t, r) != 3 || string(r.Stderr) != "oops\n" {
		t.Fatalf("exit 3: %+v", r)
	}
	if r := run(t, a, "no-such-program-here"); exitOf(t, r) != 127 || len(r.Stderr) == 0 {
		t.Fatalf("missing program: %+v", r)
	}
	if r := run(t, a, "sh", "-c", "kill -9 $$"); exitOf(t, r) != 137 {
		t.Fatalf("killed by a signal: %+v", r)
	}
	// The working directory is the root's workdir; env is added to the agent's own, without what tunes
	// the agent's runtime.
	res, err := a.c.Exec(ctx(t), protocol.ExecRequest{Argv: []string{"sh", "-c", "pwd; echo $FOO; echo ${GOMAXPROCS-unset}"},
		Env: map[string]string{"FOO": "bar"}, TimeoutMs: 5000, MaxOutputBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(a.root, "workspace") + "\nbar\nunset\n"
	if string(res.Stdout) != want {
		t.Fatalf("pwd and env: got %q, want %q", res.Stdout, want)
	}
	res, err = a.c.Exec(ctx(t), protocol.ExecRequest{Argv: []string{"true"}, Cwd: "missing", TimeoutMs: 5000, MaxOutputBytes: 1000})
	if err != nil || exitOf(t, res) != 127 {
		t.Fatalf("missing cwd: %+v %v", res, err)
	}
	_, err = a.c.Exec(ctx(t), protocol.ExecRequest{Argv: nil, TimeoutMs: 5000, MaxOutputBytes: 1000})
	if !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("empty argv: %v", err)
	}
}

func TestTimeoutKillsTheGroup(t *testing.T) {
	a := start(t)
	pidFile := filepath.Join(a.root, "bg.pid")
	res, err := a.c.Exec(ctx(t), protocol.ExecRequest{
		Argv:      []string{"sh", "-c", "sleep 300 & echo $! > " + pidFile + "; sleep 300"},
		TimeoutMs: 300, MaxOutputBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.ExitCode != nil {
		t.Fatalf("want timed out without exit code: %+v", res)
	}
	waitGone(t, pidFile)
}

// waitGone waits until the process whose pid is in file no longer exists.
func waitGone(t *testing.T, file string) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(raw))
	for i := 0; ; i++ {
		if _, err := os.Stat("/proc/" + pid); os.IsNotExist(err) {
			return
		}
		if i > 500 {
			t.Fatalf("process %s still exists", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestOutputCap(t *testing.T) {
	a := start(t)
	res, err := a.c.Exec(ctx(t), protocol.ExecRequest{Argv: []string{"sh", "-c", "head -c 100000 /dev/zero; echo short >&2"},
		TimeoutMs: 5000, MaxOutputBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != 100 || string(res.Stderr) != "short\n" || !res.Truncated || exitOf(t, res) != 0 {
		t.Fatalf("cap: %d bytes, %q, truncated %v", len(res.Stdout), res.Stderr, res.Truncated)
	}
	// A multi-byte sequence is never split.
	res, err = a.c.Exec(ctx(t), protocol.ExecRequest{Argv: []string{"printf", "aé"}, TimeoutMs: 5000, MaxOutputBytes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "a" || !res.Truncated {
		t.Fatalf("utf-8 cut: %q %v", res.Stdout, res.Truncated)
	}
}

func TestCancel(t *testing.T) {
	a := start(t)
	pidFile := filepath.Join(a.root, "c.pid")
	done := make(chan protocol.ExecOutput, 1)
	go func() {
		res, err := a.c.Exec(ctx(t), protocol.ExecRequest{ID: "run-1", Argv: []string{"sh", "-c", "echo $$ > " + pidFile + "; echo started; exec sleep 300"},
			TimeoutMs: 60000, MaxOutputBytes: 1000})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	waitFile(t, pidFile)
	if err := a.c.Cancel(ctx(t), "run-1"); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if !res.Cancelled || res.ExitCode != nil || string(res.Stdout) != "started\n" {
		t.Fatalf("cancelled run: %+v", res)
	}
	waitGone(t, pidFile)

	// A caller that goes away cancels its command too.
	pidFile2 := filepath.Join(a.root, "d.pid")
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	errc := make(chan error, 1)
	go func() {
		_, err := a.c.Exec(cctx, protocol.ExecRequest{Argv: []string{"sh", "-c", "echo $$ > " + pidFile2 + "; exec sleep 300"},
			TimeoutMs: 60000, MaxOutputBytes: 1000})
		errc <- err
	}()
	waitFile(t, pidFile2)
	cancel()
	if err := <-errc; !errors.Is(err, sandbox.ErrProviderUnavailable) {
		t.Fatalf("gone caller: %v", err)
	}
	waitGone(t, pidFile2)
}

func waitFile(t *testing.T, p string) {
	t.Helper()
	for i := 0; ; i++ {
		if b, err := os.ReadFile(p); err == nil && len(b) > 0 && b[len(b)-1] == '\n' {
			return
		}
		if i > 1000 {
			t.Fatalf("%s never written", p)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDeadlineIsChecked(t *testing.T) {
	a := start(t)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", a.socket)
	}}}
	marker := filepath.Join(a.root, "workspace", "ran")
	body := `{"argv":["touch","` + marker + `"],"timeoutMs":1000,"maxOutputBytes":10}`
	for _, tc := range []struct {
		deadline string
		status   int
	}{
		{strconv.FormatInt(time.Now().Add(-time.Second).UnixNano(), 10), http.StatusGatewayTimeout},
		{"", http.StatusBadRequest},
		{"soon", http.StatusBadRequest},
	} {
		req, _ := http.NewRequest(http.MethodPost, "http://agent"+protocol.PathExec, strings.NewReader(body))
		req.Header.Set(protocol.HeaderDeadline, tc.deadline)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Fatalf("deadline %q: status %d, want %d", tc.deadline, resp.StatusCode, tc.status)
		}
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("a request past its deadline ran: %v", err)
	}
}

func TestFiles(t *testing.T) {
	a := start(t)
	c := ctx(t)
	if err := a.c.WriteFile(c, "sub/dir/f.txt", []byte("content")); err != nil {
		t.Fatal(err)
	}
	got, err := a.c.ReadFile(c, "/workspace/sub/dir/f.txt")
	if err != nil || string(got) != "content" {
		t.Fatalf("read back: %q %v", got, err)
	}
	entries, err := a.c.List(c, "sub")
	if err != nil || len(entries) != 1 || entries[0] != (sandbox.FileEntry{Path: "sub/dir", Kind: sandbox.KindDirectory, Size: entries[0].Size}) {
		t.Fatalf("list: %+v %v", entries, err)
	}
	if _, err := a.c.ReadFile(c, "nope"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := a.c.ReadFile(c, "sub"); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("directory read as a file: %v", err)
	}
	if _, err := a.c.List(c, "sub/dir/f.txt"); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("file listed as a directory: %v", err)
	}
	// Neither ".." nor a symlink leaves the root.
	if err := a.c.WriteFile(c, "../../../../escape", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(a.root, "escape")); err != nil {
		t.Fatalf("the write did not land at the root: %v", err)
	}
	if err := os.Symlink("/etc", filepath.Join(a.root, "workspace", "etc-link")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.c.ReadFile(c, "etc-link/hostname"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("symlink out of the root: %v", err)
	}
}

func TestReapsOrphans(t *testing.T) {
	a := start(t)
	// The orphan leaves the command's process group, outlives it and is adopted by the agent.
	res := run(t, a, "sh", "-c", "setsid sh -c 'sleep 0.2' </dev/null >/dev/null 2>&1 &")
	if exitOf(t, res) != 0 {
		t.Fatalf("%+v", res)
	}
	for i := 0; ; i++ {
		time.Sleep(50 * time.Millisecond)
		kids := children(t, a.pid)
		if len(kids) == 0 {
			break
		}
		if i > 100 {
			t.Fatalf("children of the agent left: %v", kids)
		}
	}
}

// children lists the processes (zombies included) whose parent is pid.
func children(t *testing.T, pid int) []string {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range dirs {
		stat, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, d.Name()+" "+f[0])
		}
	}
	return out
}

// TestExecAnswersJSONWithoutAccept: a client that does not ask for the compact answer (one of an
// earlier daemon) gets ExecResult as JSON, output and all.
func TestExecAnswersJSONWithoutAccept(t *testing.T) {
	a := start(t)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", a.socket)
	}}}
	body := `{"argv":["sh","-c","printf out; printf err >&2"],"timeoutMs":5000,"maxOutputBytes":100}`
	req, err := http.NewRequestWithContext(ctx(t), http.MethodPost, "http://agent"+protocol.PathExec, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(protocol.HeaderDeadline, strconv.FormatInt(time.Now().Add(time.Minute).UnixNano(), 10))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res protocol.ExecResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("answer %s: %v", resp.Header.Get("Content-Type"), err)
	}
	if exitOf(t, protocol.ExecOutput{ExecStatus: res.ExecStatus}) != 0 || string(res.Stdout) != "out" || string(res.Stderr) != "err" {
		t.Fatalf("result %+v", res)
	}
}

// TestListLimits: the agent lists a directory of MaxListEntries entries; it refuses one more, a
// directory of 100,000 long names, and a listing past MaxListBytes (long paths) with invalid_request, a
// 400 through the API, not a malformed answer.
func TestListLimits(t *testing.T) {
	a := start(t)
	ws := filepath.Join(a.root, "workspace")
	// links makes the entries from to to of dir, the i-th named name(i): hard links, cheaper than
	// files, to one of a few targets (a file takes some 65,000 links).
	made := 0
	links := func(dir string, from, to int, name func(int) string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := from; i < to; i++ {
			target := filepath.Join(a.root, "target"+strconv.Itoa(made/50_000))
			if made%50_000 == 0 {
				if err := os.WriteFile(target, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			made++
			if err := os.Link(target, filepath.Join(dir, name(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	short := func(i int) string { return strconv.Itoa(i) }
	long := func(i int) string { return fmt.Sprintf("%0250d", i) }
	refused := func(p string) {
		t.Helper()
		_, err := a.c.List(ctx(t), p)
		if !errors.Is(err, sandbox.ErrInvalidRequest) || errhttp.StatusOf(err) != http.StatusBadRequest {
			t.Errorf("list %.40s...: %v, want %v", p, err, sandbox.ErrInvalidRequest)
		}
	}

	links(filepath.Join(ws, "full"), 0, protocol.MaxListEntries, short)
	if entries, err := a.c.List(ctx(t), "full"); err != nil || len(entries) != protocol.MaxListEntries {
		t.Fatalf("list of %d entries: %d entries, %v", protocol.MaxListEntries, len(entries), err)
	}
	links(filepath.Join(ws, "full"), protocol.MaxListEntries, protocol.MaxListEntries+1, short)
	refused("full")

	links(filepath.Join(ws, "big"), 0, 100_000, func(i int) string { return fmt.Sprintf("%0200d", i) })
	refused("big")

	// 6,000 entries whose paths are some 3,300 bytes long: under MaxListEntries, past MaxListBytes.
	deep := strings.Repeat(long(0)+"/", 12)[:12*251-1]
	links(filepath.Join(ws, deep), 0, 6000, long)
	refused(deep)
}
