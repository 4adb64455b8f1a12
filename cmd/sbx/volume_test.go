package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestVolumeCommands drives `sbx volume create|ls|get|rm`, `sbx create -v` and `sbx top` against a
// daemon on the oci provider: a volume written by one sandbox is read, mounted read-only, by the next
// after a terminate; it is not removed while a sandbox mounts it; top shows the sandbox's usage.
func TestVolumeCommands(t *testing.T) {
	st := newOCIStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sbx := sbxOf(t, ctx, st.URL)

	if out := sbx(0, "volume", "create", "cache", "--size", "16"); out != "cache\n" {
		t.Fatalf("volume create: %q", out)
	}
	sbx(1, "volume", "create", "cache", "--size", "16") // the name is taken
	if out := sbx(0, "volume", "ls"); !regexp.MustCompile(`(?m)^cache +16 MiB +\d[\d.]* ([KMG]i)?B +no +- `).MatchString(out) {
		t.Fatalf("volume ls:\n%s", out)
	}
	var sb struct{ ID string }
	if err := json.Unmarshal([]byte(sbx(0, "create", "--wait", "-v", "cache:/data", "-o", "json")), &sb); err != nil || sb.ID == "" {
		t.Fatalf("create -v: %+v %v", sb, err)
	}
	sbx(0, "exec", sb.ID, "--", "sh", "-c", "echo kept > /data/note")
	if out := sbx(0, "volume", "get", "cache"); !strings.Contains(out, sb.ID) {
		t.Fatalf("volume get does not say %s mounts it:\n%s", sb.ID, out)
	}
	sbx(1, "volume", "rm", "cache") // mounted

	// top, once: the sandbox's memory, limit, processes and disk as the host's cgroups and its disk say
	// (its CPU share needs two rounds; it has no network link of its own).
	row := regexp.MustCompile(`(?m)^` + sb.ID + ` +ready +- +\d[\d.]* [KMG]iB +\d[\d.]* [KMG]iB +\d+ +\d[\d.]* ([KMG]i)?B +- +-$`)
	if out := sbx(0, "top", "-n", "1"); !strings.HasPrefix(out, "ID ") || !row.MatchString(out) {
		t.Fatalf("top -n 1:\n%s", out)
	}
	if out := sbx(0, "top", "-n", "2", "--interval", "200ms"); !regexp.MustCompile(`(?m)^` + sb.ID + ` +ready +\d+\.\d%`).MatchString(out) {
		t.Fatalf("top -n 2 shows no CPU share:\n%s", out)
	}

	sbx(0, "terminate", sb.ID, "--wait")
	var next struct{ ID string }
	if err := json.Unmarshal([]byte(sbx(0, "create", "--wait", "-v", "cache:/mnt/c:ro", "-o", "json")), &next); err != nil || next.ID == "" {
		t.Fatalf("create -v :ro: %+v %v", next, err)
	}
	if out := sbx(0, "exec", next.ID, "--", "cat", "/mnt/c/note"); out != "kept\n" {
		t.Fatalf("the next sandbox reads %q", out)
	}
	sbx(7, "exec", next.ID, "--", "sh", "-c", "echo more > /mnt/c/note || exit 7") // read-only
	sbx(0, "terminate", next.ID, "--wait")
	sbx(0, "volume", "rm", "cache")
	if out := sbx(0, "volume", "ls"); strings.Contains(out, "cache") {
		t.Fatalf("volume ls after rm:\n%s", out)
	}
	sbx(1, "volume", "get", "cache")
}
