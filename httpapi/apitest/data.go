package apitest

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

// result is a command result as the wire has it (exitCode may be null).
type result struct {
	ExitCode  *int   `json:"exitCode"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	TimedOut  bool   `json:"timedOut"`
	Cancelled bool   `json:"cancelled"`
	Truncated bool   `json:"truncated"`
	StartedAt string `json:"startedAt"`
}

func cmdBody(g sandbox.Generation, argv ...string) map[string]any {
	return map[string]any{"expectedGeneration": g, "argv": argv}
}

func (st *stack) exec(id sandbox.ID, body map[string]any) result {
	st.t.Helper()
	var r result
	st.c.ok("POST", sbPath(id, "/commands"), body, 200, &r)
	return r
}

func (s *suite) testCommands(t *testing.T) {
	st := s.newStack(t, s.newProvider(t), options{})
	sb := st.create(nil)
	p := sbPath(sb.ID, "/commands")

	r := st.exec(sb.ID, map[string]any{"expectedGeneration": 1, "argv": []string{"sh", "-c", `printf "$GREETING"; printf oops >&2; exit 3`},
		"env": map[string]string{"GREETING": "hello"}})
	if r.ExitCode == nil || *r.ExitCode != 3 || r.Stdout != "hello" || r.Stderr != "oops" || r.TimedOut || r.Cancelled || r.Truncated {
		t.Fatalf("result %+v", r)
	}
	// argv is not run through a shell.
	r = st.exec(sb.ID, cmdBody(1, "echo", "$HOME", "*", ";", "id"))
	if r.ExitCode == nil || *r.ExitCode != 0 || r.Stdout != "$HOME * ; id\n" {
		t.Fatalf("echo result %+v", r)
	}
	// cwd, relative to the working directory.
	st.exec(sb.ID, cmdBody(1, "mkdir", "-p", "sub/dir"))
	r = st.exec(sb.ID, map[string]any{"expectedGeneration": 1, "argv": []string{"sh", "-c", "basename $(pwd)"}, "cwd": "sub/dir"})
	if r.Stdout != "dir\n" {
		t.Fatalf("cwd result %+v", r)
	}
	// Timeout: the process group is killed, no exit code.
	r = st.exec(sb.ID, map[string]any{"expectedGeneration": 1, "argv": []string{"sh", "-c", "sleep 30 & sleep 30"}, "timeoutSeconds": 0.3})
	if !r.TimedOut || r.ExitCode != nil || r.Cancelled {
		t.Fatalf("timeout result %+v", r)
	}
	// Truncation caps each stream; the command still completes.
	r = st.exec(sb.ID, map[string]any{"expectedGeneration": 1, "argv": []string{"sh", "-c", "head -c 100000 /dev/zero | tr '\\0' a; echo done >&2"}, "maxOutputBytes": 10})
	if !r.Truncated || r.Stdout != "aaaaaaaaaa" || r.Stderr != "done\n" || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("truncation result %+v", r)
	}
	// A program that cannot start is a result.
	r = st.exec(sb.ID, cmdBody(1, "/no/such/program-apitest"))
	if r.ExitCode == nil || *r.ExitCode != 127 || r.Stderr == "" {
		t.Fatalf("missing program result %+v", r)
	}

	for name, body := range map[string]string{
		"no argv":            `{"expectedGeneration":1}`,
		"empty argv":         `{"expectedGeneration":1,"argv":[]}`,
		"argv not strings":   `{"expectedGeneration":1,"argv":[1]}`,
		"no generation":      `{"argv":["true"]}`,
		"generation zero":    `{"expectedGeneration":0,"argv":["true"]}`,
		"timeout zero":       `{"expectedGeneration":1,"argv":["true"],"timeoutSeconds":0}`,
		"timeout over":       `{"expectedGeneration":1,"argv":["true"],"timeoutSeconds":3600.5}`,
		"max output zero":    `{"expectedGeneration":1,"argv":["true"],"maxOutputBytes":0}`,
		"max output over":    `{"expectedGeneration":1,"argv":["true"],"maxOutputBytes":10485761}`,
		"env not strings":    `{"expectedGeneration":1,"argv":["true"],"env":{"A":1}}`,
		"unknown field":      `{"expectedGeneration":1,"argv":["true"],"shell":true}`,
		"cwd not a string":   `{"expectedGeneration":1,"argv":["true"],"cwd":["a"]}`,
		"not JSON":           `{"expectedGeneration":1,"argv":["true"]`,
		"generation a float": `{"expectedGeneration":1.25,"argv":["true"]}`,
	} {
		_ = name
		st.c.fails("POST", p, body, 400, sandbox.CodeInvalidRequest)
	}
	st.c.fails("POST", sbPath("sbx_missing", "/commands"), cmdBody(1, "true"), 404, sandbox.CodeNotFound)
	st.c.fails("POST", p, cmdBody(2, "true"), 409, sandbox.CodeGenerationConflict)

	// Not ready.
	st.c.ok("POST", sbPath(sb.ID, "/actions/terminate"), gen(1), 200, nil)
	st.waitState(sb.ID, sandbox.StateTerminated)
	st.c.fails("POST", p, cmdBody(1, "true"), 409, sandbox.CodeInvalidState)
	// A stale generation wins over the state.
	st.c.fails("POST", p, cmdBody(5, "true"), 409, sandbox.CodeGenerationConflict)
}

func fileBody(g sandbox.Generation, path string, data []byte) map[string]any {
	return map[string]any{"expectedGeneration": g, "path": path, "contentBase64": base64.StdEncoding.EncodeToString(data)}
}

func filePath(id sandbox.ID, path string, g sandbox.Generation) string {
	return fmt.Sprintf("%s?path=%s&expectedGeneration=%d", sbPath(id, "/files/content"), queryEscape(path), g)
}

func entriesPath(id sandbox.ID, path string, g sandbox.Generation) string {
	return fmt.Sprintf("%s?path=%s&expectedGeneration=%d", sbPath(id, "/files/entries"), queryEscape(path), g)
}

func queryEscape(s string) string {
	return strings.NewReplacer("%", "%25", "&", "%26", "+", "%2B", " ", "%20", "#", "%23").Replace(s)
}

func (st *stack) readFile(id sandbox.ID, path string) []byte {
	st.t.Helper()
	var fc api.FileContent
	st.c.ok("GET", filePath(id, path, 1), nil, 200, &fc)
	data, err := base64.StdEncoding.DecodeString(fc.ContentBase64)
	if err != nil || fc.Path != path || fc.Size != int64(len(data)) {
		st.t.Fatalf("read %s: %+v (%v)", path, fc, err)
	}
	return data
}

func (s *suite) testFiles(t *testing.T) {
	st := s.newStack(t, s.newProvider(t), options{})
	sb := st.create(nil)
	put := sbPath(sb.ID, "/files/content")
	content := []byte("line one\n\x00\xff binary too\n")
	var w api.FileContent
	st.c.ok("PUT", put, fileBody(1, "notes/a.txt", content), 200, &w)
	if w.Path != "notes/a.txt" || w.ContentBase64 != "" || w.Size != int64(len(content)) {
		t.Fatalf("write answered %+v", w)
	}
	if got := st.readFile(sb.ID, "notes/a.txt"); string(got) != string(content) {
		t.Fatalf("read back %q", got)
	}
	// An empty file, and replacing a file.
	st.c.ok("PUT", put, fileBody(1, "notes/empty", nil), 200, nil)
	st.c.ok("PUT", put, fileBody(1, "notes/a.txt", []byte("v2")), 200, nil)
	if got := st.readFile(sb.ID, "notes/a.txt"); string(got) != "v2" {
		t.Fatalf("read after replace %q", got)
	}
	// The command sees what the API wrote.
	if r := st.exec(sb.ID, cmdBody(1, "cat", "notes/a.txt")); r.Stdout != "v2" {
		t.Fatalf("cat %+v", r)
	}

	var list api.FileList
	st.c.ok("GET", entriesPath(sb.ID, "notes", 1), nil, 200, &list)
	want := map[string]sandbox.FileEntry{
		"notes/a.txt": {Path: "notes/a.txt", Kind: sandbox.KindFile, Size: 2},
		"notes/empty": {Path: "notes/empty", Kind: sandbox.KindFile, Size: 0},
	}
	if len(list.Entries) != len(want) {
		t.Fatalf("entries %+v", list.Entries)
	}
	for _, e := range list.Entries {
		if want[e.Path] != e {
			t.Fatalf("entry %+v, want one of %+v", e, want)
		}
	}
	// path defaults to ".".
	st.c.ok("GET", sbPath(sb.ID, "/files/entries?expectedGeneration=1"), nil, 200, &list)
	found := false
	for _, e := range list.Entries {
		found = found || (e.Kind == sandbox.KindDirectory && strings.TrimPrefix(e.Path, "./") == "notes")
	}
	if !found {
		t.Fatalf("default listing %+v has no notes directory", list.Entries)
	}

	// Missing: 404.
	st.c.fails("GET", filePath(sb.ID, "notes/missing", 1), nil, 404, sandbox.CodeNotFound)
	st.c.fails("GET", entriesPath(sb.ID, "missing-dir", 1), nil, 404, sandbox.CodeNotFound)
	st.c.fails("GET", filePath("sbx_missing", "a", 1), nil, 404, sandbox.CodeNotFound)
	st.c.fails("PUT", sbPath("sbx_missing", "/files/content"), fileBody(1, "a", nil), 404, sandbox.CodeNotFound)
	st.c.fails("GET", entriesPath("sbx_missing", ".", 1), nil, 404, sandbox.CodeNotFound)
	// A directory where a file is expected, and the reverse: 400.
	st.c.fails("GET", filePath(sb.ID, "notes", 1), nil, 400, sandbox.CodeInvalidRequest)
	st.c.fails("PUT", put, fileBody(1, "notes", []byte("x")), 400, sandbox.CodeInvalidRequest)
	st.c.fails("GET", entriesPath(sb.ID, "notes/a.txt", 1), nil, 400, sandbox.CodeInvalidRequest)
	// Bad base64 and other invalid requests.
	for _, b64 := range []string{"not base64!", "YQ", "YQ==YQ==", "YW\nJj", "YWJj_-"} {
		st.c.fails("PUT", put, map[string]any{"expectedGeneration": 1, "path": "b", "contentBase64": b64}, 400, sandbox.CodeInvalidRequest)
	}
	st.c.fails("PUT", put, `{"expectedGeneration":1,"path":"b"}`, 400, sandbox.CodeInvalidRequest)
	st.c.fails("PUT", put, `{"expectedGeneration":1,"path":"b","contentBase64":"","mode":"0600"}`, 400, sandbox.CodeInvalidRequest)
	for _, q := range []string{"?expectedGeneration=1", "?path=a", "?path=a&expectedGeneration=0", "?path=a&expectedGeneration=one", "?path=&expectedGeneration=1"} {
		st.c.fails("GET", sbPath(sb.ID, "/files/content"+q), nil, 400, sandbox.CodeInvalidRequest)
	}
	st.c.fails("GET", sbPath(sb.ID, "/files/entries?path=."), nil, 400, sandbox.CodeInvalidRequest)
	// Stale generation: 409, even for a missing file.
	st.c.fails("GET", filePath(sb.ID, "notes/missing", 2), nil, 409, sandbox.CodeGenerationConflict)
	st.c.fails("PUT", put, fileBody(2, "x", nil), 409, sandbox.CodeGenerationConflict)
	st.c.fails("GET", entriesPath(sb.ID, ".", 2), nil, 409, sandbox.CodeGenerationConflict)
	// Not ready: 409 invalid_state.
	st.c.ok("POST", sbPath(sb.ID, "/actions/terminate"), gen(1), 200, nil)
	st.waitState(sb.ID, sandbox.StateTerminated)
	st.c.fails("GET", filePath(sb.ID, "notes/a.txt", 1), nil, 409, sandbox.CodeInvalidState)
	st.c.fails("PUT", put, fileBody(1, "x", nil), 409, sandbox.CodeInvalidState)
	st.c.fails("GET", entriesPath(sb.ID, ".", 1), nil, 409, sandbox.CodeInvalidState)
}

// testFileConfinement checks that no path, however written, leaves the sandbox.
func (s *suite) testFileConfinement(t *testing.T) {
	st := s.newStack(t, s.newProvider(t), options{})
	sb := st.create(nil)
	put := sbPath(sb.ID, "/files/content")
	// ".." cannot climb above the root: the file lands at the sandbox's /tmp/escape-<id> (/tmp, because a
	// provider may keep the rest of its root read-only).
	name := "tmp/apitest-escape-" + string(sb.ID)
	st.c.ok("PUT", put, fileBody(1, "../../../../../../"+name, []byte("inside")), 200, nil)
	if got := st.readFile(sb.ID, "/"+name); string(got) != "inside" {
		t.Fatalf("read /%s: %q", name, got)
	}
	if _, err := os.Stat(filepath.Join("/", name)); !os.IsNotExist(err) {
		t.Fatalf("a write reached the host's /%s (%v)", name, err)
	}
	// A symlink to an absolute host path is resolved inside the root too.
	hostDir := t.TempDir()
	if r := st.exec(sb.ID, cmdBody(1, "ln", "-s", hostDir, "link")); r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("ln: %+v", r)
	}
	w := st.c.send("PUT", put, fileBody(1, "link/through-link", []byte("x")))
	if w.status != 200 && w.status != 400 && w.status != 404 {
		t.Fatalf("write through a symlink: %d %s", w.status, w.body)
	}
	if _, err := os.Stat(filepath.Join(hostDir, "through-link")); !os.IsNotExist(err) {
		t.Fatalf("a write through a symlink reached the host directory %s (%v)", hostDir, err)
	}
	secret := filepath.Join(hostDir, "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := st.c.send("GET", filePath(sb.ID, "link/secret", 1), nil)
	if r.status == 200 && strings.Contains(string(r.body), base64.StdEncoding.EncodeToString([]byte("host secret"))) {
		t.Fatalf("a read through a symlink reached the host file %s", secret)
	}
	r = st.c.send("GET", filePath(sb.ID, "../../../../.."+secret, 1), nil)
	if r.status == 200 {
		t.Fatalf("a read with .. reached the host file %s: %s", secret, r.body)
	}
}

// testLargeFile writes and reads a file past 16 MiB through the default body limit.
func (s *suite) testLargeFile(t *testing.T) {
	st := s.newStack(t, s.newProvider(t), options{})
	sb := st.create(nil)
	data := make([]byte, 17<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	var w api.FileContent
	st.c.ok("PUT", sbPath(sb.ID, "/files/content"), fileBody(1, "big.bin", data), 200, &w)
	if w.Size != int64(len(data)) {
		t.Fatalf("wrote %d bytes, want %d", w.Size, len(data))
	}
	got := st.readFile(sb.ID, "big.bin")
	if string(got) != string(data) {
		t.Fatalf("read back %d bytes that differ", len(got))
	}
	// A large body is checked as a small one: bad base64, a line break, an unknown member, a stale
	// generation.
	b64 := base64.StdEncoding.EncodeToString(data[:1<<20])
	put := sbPath(sb.ID, "/files/content")
	for _, bad := range []string{b64[:1000] + "!" + b64[1001:], b64[:1000] + "\n" + b64[1000:]} {
		st.c.fails("PUT", put, `{"expectedGeneration":1,"path":"b","contentBase64":"`+bad+`"}`, 400, sandbox.CodeInvalidRequest)
	}
	st.c.fails("PUT", put, `{"expectedGeneration":1,"path":"b","contentBase64":"`+b64+`","mode":"0600"}`, 400, sandbox.CodeInvalidRequest)
	st.c.fails("PUT", put, fileBody(2, "b", data[:1<<20]), 409, sandbox.CodeGenerationConflict)
	if got := st.readFile(sb.ID, "big.bin"); string(got) != string(data) {
		t.Fatal("a refused write changed the file")
	}
}
