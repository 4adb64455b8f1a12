package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// apiError is the error document of every refused request.
type apiError struct {
	Error struct{ Code, Message string }
}

// TestFullDisk runs the daemon on a data directory that fills up: a small tmpfs holding its database
// and its sandboxes' state. While the disk is full the daemon keeps serving: reads answer, a write the
// store cannot commit is refused with 500 internal, a command still runs, a file write is refused in a
// host sandbox, whose directory is on that disk (503), and taken by an oci sandbox, whose /workspace
// is a disk of its own (a sparse image, docs/reliability.md); a daemon killed then starts again on the
// full disk. Once space is freed
// every refused create can be repeated, and a restart finds everything acknowledged, with no cursor
// reused and no sandbox left transitional. On the oci provider with its default warm pool, whose
// filler meets the full disk too.
func TestFullDisk(t *testing.T) {
	t.Run("host", func(t *testing.T) { fullDisk(t, 8<<20, fullWrite{503, "provider_unavailable", false}) })
	t.Run("oci", func(t *testing.T) {
		needOCI(t)
		// Each sandbox's sparse disk image takes some of the data disk (its file system's metadata):
		// a larger data disk, and small sandbox disks, so that every refused create fits once space
		// is freed.
		fullDisk(t, 64<<20, fullWrite{200, "", true}, "--provider", "oci", "--oci-disk-mib", "8")
	})
}

// fullWrite is the answer to a file write into a sandbox on the full disk.
type fullWrite struct {
	status int
	code   string
	// ownDisk: the sandbox's files are on a disk of its own, made at allocation, which may then fail
	// for want of space on the full disk (503, the sandbox recorded as failed).
	ownDisk bool
}

func fullDisk(t *testing.T, size int, write fullWrite, flags ...string) {
	dataDir := smallDisk(t, size)
	removeContainersAtEnd(t, dataDir) // after the daemons stop, before the disk goes
	a := &acked{creates: map[string]*sandbox.Sandbox{}, gens: map[sandbox.ID]sandbox.Generation{}}
	ctx := context.Background()
	d := startDaemon(t, dataDir, flags...)
	create := func(key string) (int, *sandbox.Sandbox, apiError) {
		var raw json.RawMessage
		var sb sandbox.Sandbox
		var e apiError
		st := call(ctx, "POST", d.url+"/v1/sandboxes", map[string]any{"clientRequestId": key}, &raw)
		if st != 201 {
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatalf("create %s: %d %s", key, st, raw)
			}
			return st, nil, e
		}
		if err := json.Unmarshal(raw, &sb); err != nil {
			t.Fatal(err)
		}
		a.mu.Lock()
		a.creates[key] = &sb
		a.mu.Unlock()
		a.sandbox(&sb)
		return st, &sb, e
	}
	var before []*sandbox.Sandbox
	for i := range 3 {
		st, sb, e := create(fmt.Sprintf("before-%d", i))
		if st != 201 {
			t.Fatalf("create before the disk fills: %d %+v", st, e)
		}
		before = append(before, sb)
	}
	first := before[0]
	base := fmt.Sprintf("%s/v1/sandboxes/%s", d.url, first.ID)

	filler := filepath.Join(dataDir, "filler")
	fill(t, filler)
	var refused []string
	for i := range 40 {
		key := fmt.Sprintf("full-%d", i)
		switch st, _, e := create(key); {
		case st == 500 && e.Error.Code == "internal":
			refused = append(refused, key)
		case st == 503 && e.Error.Code == "provider_unavailable" && write.ownDisk:
			// An oci sandbox's disk could not be made on the full disk: recorded, and failed.
		case st != 201:
			t.Fatalf("create on a full disk: %d %+v, want 201 or 500 internal", st, e)
		}
	}
	if len(refused) == 0 {
		t.Fatal("every create was committed on a full disk: the store did not run out of space")
	}
	var actions []string
	for i, action := range []string{"pause", "terminate"} {
		sb := before[i+1]
		var raw json.RawMessage
		st := call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/actions/%s", d.url, sb.ID, action),
			map[string]any{"expectedGeneration": sb.Generation}, &raw)
		actions = append(actions, fmt.Sprintf("%s %d", action, st))
		var e apiError
		switch {
		case st == 200:
			var got sandbox.Sandbox
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatal(err)
			}
			a.sandbox(&got)
		case st != 500 || json.Unmarshal(raw, &e) != nil || e.Error.Code != "internal":
			t.Fatalf("%s on a full disk: %d %s, want 200 or 500 internal", action, st, raw)
		}
	}
	shown := map[int64]sandbox.Event{}
	checkServesFull(t, d, base, filler, first, write, shown)
	// What the daemon lists is in the file: a refused create either recorded nothing or recorded its
	// sandbox before the write that failed, and then the sandbox is there after a restart.
	listed := list(t, d)

	// A daemon killed on a full disk starts again on it.
	d.kill()
	d = startDaemon(t, dataDir, flags...)
	base = fmt.Sprintf("%s/v1/sandboxes/%s", d.url, first.ID)
	checkServesFull(t, d, base, filler, first, write, shown)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for _, key := range refused {
		// A create refused for want of space may have been recorded before the write that failed (the
		// provider's answer): repeating it answers that sandbox or makes it now.
		st, sb, e := create(key)
		if st != 201 {
			t.Fatalf("create %s again once space is freed: %d %+v", key, st, e)
		}
		for id, k := range listed {
			if k == key && id != sb.ID {
				t.Fatalf("create %s again: sandbox %s, but %s was listed for it on the full disk", key, sb.ID, id)
			}
		}
	}
	var e apiError
	if st := call(ctx, "PUT", base+"/files/content", map[string]any{"expectedGeneration": first.Generation,
		"path": "after.txt", "contentBase64": "aGk="}, &e); st != 200 {
		t.Fatalf("file write once space is freed: %d %+v", st, e)
	}
	seen := readEvents(t, d, shown)

	d.kill()
	d = startDaemon(t, dataDir, flags...)
	checkRecovered(t, d, a, seen)
	checkEventsKept(t, d, shown)
	after := list(t, d)
	for id, key := range listed {
		if _, ok := after[id]; !ok {
			t.Fatalf("sandbox %s (%s), listed on the full disk, is gone after a restart", id, key)
		}
	}
	t.Logf("on the full disk: %d creates refused of 40, all made once space was freed; %s", len(refused), strings.Join(actions, ", "))
}

// checkServesFull checks what a daemon on a full disk still does for the ready sandbox sb, and adds the
// events it shows to shown.
func checkServesFull(t *testing.T, d *daemon, base, filler string, sb *sandbox.Sandbox, write fullWrite, shown map[int64]sandbox.Event) {
	t.Helper()
	ctx := context.Background()
	if st := call(ctx, "GET", d.url+"/healthz", nil, nil); st != 200 {
		t.Fatalf("healthz on a full disk: %d", st)
	}
	var got sandbox.Sandbox
	if st := call(ctx, "GET", base, nil, &got); st != 200 || got.State != sandbox.StateReady {
		t.Fatalf("get on a full disk: %d %+v", st, got)
	}
	// The command runs; its completion event may not be recorded (the daemon logs that).
	var res sandbox.CommandResult
	if st := call(ctx, "POST", base+"/commands", map[string]any{"expectedGeneration": sb.Generation,
		"argv": []string{"sh", "-c", "echo hi"}}, &res); st != 200 || res.Stdout != "hi\n" {
		t.Fatalf("command on a full disk: %d %+v", st, res)
	}
	// A host sandbox's files are on the full disk too. Space the daemon freed since the disk filled (a
	// warm pool entry that failed to start on it is removed) is taken first; should more be freed
	// between that and the write, the write is tried again.
	var st int
	var e apiError
	for range 3 {
		fill(t, filler)
		e = apiError{}
		st = call(ctx, "PUT", base+"/files/content", map[string]any{"expectedGeneration": sb.Generation,
			"path": "f.txt", "contentBase64": "aGk="}, &e)
		if st != 200 {
			break
		}
	}
	if st != write.status || e.Error.Code != write.code {
		t.Fatalf("file write on a full disk: %d %+v, want %d %s", st, e, write.status, write.code)
	}
	readEvents(t, d, shown)
}

// list returns the clientRequestId of every sandbox d lists, by id.
func list(t *testing.T, d *daemon) map[sandbox.ID]string {
	t.Helper()
	var l struct{ Sandboxes []sandbox.Sandbox }
	if st := call(context.Background(), "GET", d.url+"/v1/sandboxes", nil, &l); st != 200 {
		t.Fatalf("list: %d", st)
	}
	m := map[sandbox.ID]string{}
	for _, sb := range l.Sandboxes {
		m[sb.ID] = sb.Spec.ClientRequestID
	}
	return m
}

// readEvents reads d's whole event log into shown and returns the newest cursor.
func readEvents(t *testing.T, d *daemon, shown map[int64]sandbox.Event) int64 {
	t.Helper()
	newest := int64(0)
	for _, ev := range allEvents(t, d) {
		shown[ev.Cursor] = ev
		newest = ev.Cursor
	}
	return newest
}

// smallDisk mounts a tmpfs of size bytes for the test and returns a directory on it. It needs root
// (CAP_SYS_ADMIN); without it the test is skipped, except in CI.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	mnt := testenv.StateDir(t)
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0711", size)); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("mounting a tmpfs (the CI runs as root): %v", err)
		}
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting the small disk: %v", err)
		}
	})
	dir := filepath.Join(mnt, "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fill writes to the file at path (made if need be) until the filesystem has no byte left.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, chunk := range []int{1 << 16, 1 << 12, 1} {
		buf := make([]byte, chunk)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, unix.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
	}
}
