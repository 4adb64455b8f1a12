package oci_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/testenv/filetest"
	"github.com/sandboxd/sandbox/provider/oci"
)

// BenchmarkRawFiles: a raw upload and download of 1 GiB through the whole daemon, beside their floor
// in the same run: cat through a pipe into (and out of) the same directory of the sandbox, on the host.
// The upload's and the download's SHA-256 are computed and checked, as every transfer's are. The
// sandbox has 4 GiB of memory rather than the default 1 GiB: the page cache of the file it writes is
// charged to its memory cgroup, and the floor's cat, which runs on the host, has no such limit. A
// second floor runs its cats in the sandbox's cgroups. Two untimed uploads come first, so that every
// timed one replaces a file as in a steady run (see below). Each transfer reports the CPU time and
// the context switches of the sandbox's agent and of this process (the client and the daemon) an
// iteration.
//
//	go test -run '^$' -bench BenchmarkRawFiles -benchtime 3x ./provider/oci/
func BenchmarkRawFiles(b *testing.B) {
	const size = 1 << 30
	p := newProvider(b)
	e := filetest.New(b, p, sandbox.Spec{Resources: &sandbox.Resources{DiskMiB: 3400, MemoryMiB: 4096}})
	pid, err := oci.InitPid(p, sandbox.Ref{ID: e.SB.ID, Generation: e.SB.Generation})
	if err != nil {
		b.Fatal(err)
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/root/workspace"
	ctx := context.Background()
	block := filetest.Random(1<<20, 1)
	// A caller that knows the digest (content-addressed data) spares the client's own hash.
	sum := sha256.New()
	io.Copy(sum, io.LimitReader(&pattern{block: block}, size))
	known := sum.Sum(nil)
	// Two uploads before the timed ones. Each upload writes a new file beside the one it replaces and
	// frees that one's page cache as it renames, so an upload's pages are the ones the upload before
	// it freed: new memory only for the first two. New memory costs a guest whose balloon gives free
	// pages back to its host many times what recycled pages cost (docs/performance.md, "Fresh
	// memory, and the agent's socket"), and the floor's cat, which truncates the file it writes
	// again, recycles its own from its second iteration on.
	for range 2 {
		if _, err := e.C.Upload(ctx, e.SB.ID, e.SB.Generation, "up.bin", io.LimitReader(&pattern{block: block}, size), client.UploadOptions{Size: size, Digest: known}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("upload", func(b *testing.B) {
		b.SetBytes(size)
		defer cpuMetrics(b, pid)()
		for b.Loop() {
			if _, err := e.C.Upload(ctx, e.SB.ID, e.SB.Generation, "up.bin", io.LimitReader(&pattern{block: block}, size), client.UploadOptions{Size: size}); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The uploads above run back to back, and on a guest whose balloon hands free pages back to its
	// host that makes two steady speeds (docs/performance.md, "The upload's two speeds"): each upload
	// lands on the pages the rename of the one before freed if it comes within about 2 s of it,
	// and on pages the host took back if it does not. Here each upload comes 4 s after the one before,
	// as one on its own does: its page cache is new memory whatever came before.
	b.Run("upload-alone", func(b *testing.B) {
		b.SetBytes(size)
		defer cpuMetrics(b, pid)()
		for b.Loop() {
			b.StopTimer()
			time.Sleep(4 * time.Second)
			b.StartTimer()
			if _, err := e.C.Upload(ctx, e.SB.ID, e.SB.Generation, "up.bin", io.LimitReader(&pattern{block: block}, size), client.UploadOptions{Size: size}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("upload-known-digest", func(b *testing.B) {
		b.SetBytes(size)
		defer cpuMetrics(b, pid)()
		for b.Loop() {
			if _, err := e.C.Upload(ctx, e.SB.ID, e.SB.Generation, "up.bin", io.LimitReader(&pattern{block: block}, size), client.UploadOptions{Size: size, Digest: known}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor-upload-cat", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			cmd := exec.Command("sh", "-c", "cat | cat > "+dir+"/floor.bin")
			cmd.Stdin = io.LimitReader(&pattern{block: block}, size)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		}
	})
	// The floor as an upload writes: a new file beside the old one, renamed over it at the end, so
	// that its page cache is what the rename before it freed (back to back) or new memory (alone, 4 s
	// after the last, as upload-alone): the cat above truncates its file and writes the pages it
	// freed at once, which no atomic write can.
	for _, alone := range []bool{false, true} {
		name := "floor-upload-cat-rename"
		if alone {
			name += "-alone"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				if alone {
					b.StopTimer()
					time.Sleep(4 * time.Second)
					b.StartTimer()
				}
				cmd := exec.Command("sh", "-c", "cat | cat > "+dir+"/.floor.tmp && mv "+dir+"/.floor.tmp "+dir+"/floor.bin")
				cmd.Stdin = io.LimitReader(&pattern{block: block}, size)
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%v: %s", err, out)
				}
			}
		})
	}
	// The same floor with its cats in the sandbox's cgroups: on a loaded machine the sandbox (its
	// agent's copy) gets one cgroup's share of the CPU, while the cats on the host get a share each,
	// and the sandbox's memory cgroup bounds the dirty pages of the file it writes.
	join := ""
	for _, procs := range cgroupProcs(b, pid) {
		join += "echo $$ > " + procs + " && "
	}
	b.Run("floor-upload-cat-sandbox-cgroups", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			cmd := exec.Command("sh", "-c", join+"cat | cat > "+dir+"/floor.bin")
			cmd.Stdin = io.LimitReader(&pattern{block: block}, size)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		}
	})
	b.Run("download", func(b *testing.B) {
		b.SetBytes(size)
		defer cpuMetrics(b, pid)()
		for b.Loop() {
			if _, err := e.C.Download(ctx, e.SB.ID, e.SB.Generation, "up.bin", io.Discard, client.DownloadOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor-download-cat", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			cmd := exec.Command("sh", "-c", "cat "+dir+"/up.bin | cat")
			cmd.Stdout = io.Discard
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor-sha256", func(b *testing.B) { // what checking the digest costs one side
		b.SetBytes(size)
		for b.Loop() {
			h := sha256.New()
			io.Copy(h, io.LimitReader(&pattern{block: block}, size))
		}
	})
	e.Sh("rm -f up.bin floor.bin")
}

// cpuMetrics reports, when the function it returns is called, the CPU time an iteration took and
// the context switches it made in the sandbox's agent (process pid) and in this process (the client
// and the daemon): on a shared machine, what each side did, as against how long it waited for a CPU.
func cpuMetrics(b *testing.B, pid int) func() {
	agentCPU, agentSwitches := procCPU(b, pid)
	selfCPU, selfSwitches := ownCPU()
	return func() {
		n := float64(b.N)
		cpu, switches := procCPU(b, pid)
		b.ReportMetric((cpu-agentCPU).Seconds()/n, "agent-cpu-s/op")
		b.ReportMetric(float64(switches-agentSwitches)/n, "agent-ctxsw/op")
		cpu, switches = ownCPU()
		b.ReportMetric((cpu-selfCPU).Seconds()/n, "daemon+client-cpu-s/op")
		b.ReportMetric(float64(switches-selfSwitches)/n, "daemon+client-ctxsw/op")
	}
}

// procCPU is the user and system time process pid has used (all its threads), and the context
// switches of its threads alive.
func procCPU(b *testing.B, pid int) (time.Duration, int64) {
	proc := "/proc/" + strconv.Itoa(pid)
	data, err := os.ReadFile(proc + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's closing bracket, from the state (the 3rd): utime is the 14th.
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	tasks, err := os.ReadDir(proc + "/task")
	if err != nil {
		b.Fatal(err)
	}
	var switches int64
	for _, t := range tasks {
		status, _ := os.ReadFile(proc + "/task/" + t.Name() + "/status") // a thread that ended has none
		for _, line := range strings.Split(string(status), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				switches += n
			}
		}
	}
	return time.Duration(utime+stime) * time.Second / 100, switches // USER_HZ
}

// ownCPU is the user and system time this process has used, and its context switches.
func ownCPU() (time.Duration, int64) {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Nvcsw + ru.Nivcsw
}

// cgroupProcs are the cgroup.procs files of the cgroups of process pid: one a cgroup v1 hierarchy,
// or the unified hierarchy's.
func cgroupProcs(b *testing.B, pid int) []string {
	b.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		b.Fatal(err)
	}
	var files []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		dir := "/sys/fs/cgroup/" + strings.TrimPrefix(parts[1], "name=") // v1: the hierarchy's mount
		if parts[1] == "" {
			dir = "/sys/fs/cgroup" // the unified hierarchy, where it is the only one
		}
		if f := dir + parts[2] + "/cgroup.procs"; fileExists(f) {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		b.Fatalf("no cgroup of process %d found", pid)
	}
	return files
}

func fileExists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}

// BenchmarkContract1MiB: the contract's 1 MiB file write, file read and exec output through the
// whole daemon, each beside its floor: a loopback HTTP round trip of the same JSON and base64 bytes,
// encoded and decoded in Go.
//
//	go test -run '^$' -bench BenchmarkContract1MiB ./provider/oci/
func BenchmarkContract1MiB(b *testing.B) {
	e := filetest.New(b, newProvider(b), sandbox.Spec{})
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	e.Put("text.txt", data)
	floor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/write":
			var req api.FileWriteRequest
			json.NewDecoder(r.Body).Decode(&req)
			d, _ := base64.StdEncoding.DecodeString(req.ContentBase64)
			json.NewEncoder(w).Encode(api.FileContent{Path: req.Path, Size: int64(len(d))})
		case "/read":
			json.NewEncoder(w).Encode(api.FileContent{Path: "text.txt", ContentBase64: base64.StdEncoding.EncodeToString(data), Size: int64(len(data))})
		case "/exec":
			json.NewEncoder(w).Encode(sandbox.CommandResult{Stdout: string(data)})
		}
	}))
	defer floor.Close()
	hc := floor.Client()
	roundTrip := func(b *testing.B, path string, body any, out any) {
		var rd io.Reader = http.NoBody
		if body != nil {
			raw, _ := json.Marshal(body)
			rd = bytes.NewReader(raw)
		}
		resp, err := hc.Post(floor.URL+path, "application/json", rd)
		if err != nil {
			b.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(out)
		resp.Body.Close()
	}
	b.Run("write", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := e.C.WriteFile(ctx, e.SB.ID, e.SB.Generation, "w.txt", data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor-write", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var out api.FileContent
			roundTrip(b, "/write", api.FileWriteRequest{ExpectedGeneration: 1, Path: "w.txt", ContentBase64: base64.StdEncoding.EncodeToString(data)}, &out)
		}
	})
	b.Run("read", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := e.C.ReadFile(ctx, e.SB.ID, e.SB.Generation, "text.txt"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor-read", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var out api.FileContent
			roundTrip(b, "/read", nil, &out)
			base64.StdEncoding.DecodeString(out.ContentBase64)
		}
	})
	b.Run("exec-output", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			res, err := e.C.Exec(ctx, e.SB.ID, e.SB.Generation, sandbox.Command{Argv: []string{"cat", "text.txt"}})
			if err != nil || len(res.Stdout) != len(data) {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor-exec-output", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var out sandbox.CommandResult
			roundTrip(b, "/exec", nil, &out)
			if !strings.HasPrefix(out.Stdout, "0123") {
				b.Fatal("floor answer")
			}
		}
	})
}
