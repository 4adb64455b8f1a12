package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/fastpath"
)

// startMain runs the whole daemon in-process on 127.0.0.1:0 with the host provider.
func startMain(t *testing.T, args ...string) (*Main, string) {
	t.Helper()
	var logs bytes.Buffer
	m := NewMain(&logs)
	if err := m.ParseFlags(append([]string{"--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--provider", "host"}, args...)); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatalf("run: %v\n%s", err, logs.String())
	}
	return m, "http://" + m.Addr()
}

// TestGracefulShutdown closes the daemon while a command runs and an event stream is open: the command's
// request finishes with its result, the stream ends, and new connections are refused.
func TestGracefulShutdown(t *testing.T) {
	m, url := startMain(t)
	ctx := context.Background()
	var sb sandbox.Sandbox
	if st := call(ctx, "POST", url+"/v1/sandboxes", map[string]any{"clientRequestId": "g"}, &sb); st != 201 {
		t.Fatalf("create: %d", st)
	}
	stream, err := http.Get(url + "/v1/events/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	result := make(chan int, 1)
	var res sandbox.CommandResult
	go func() {
		result <- call(ctx, "POST", fmt.Sprintf("%s/v1/sandboxes/%s/commands", url, sb.ID),
			map[string]any{"expectedGeneration": 1, "argv": []string{"sh", "-c", "sleep 0.5; echo done"}}, &res)
	}()
	time.Sleep(100 * time.Millisecond) // let the command start
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if st := <-result; st != 200 || strings.TrimSpace(res.Stdout) != "done" {
		t.Fatalf("in-flight command: status %d, %+v", st, res)
	}
	if _, err := io.ReadAll(stream.Body); err != nil {
		t.Fatalf("the event stream did not end cleanly: %v", err)
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Fatal("the daemon still accepts connections after Close")
	}
}

func TestFlagsAndEnvironment(t *testing.T) {
	t.Setenv("SANDBOXD_EVENT_RETENTION", "42")
	t.Setenv("SANDBOXD_LISTEN", "127.0.0.1:9")
	m := NewMain(io.Discard)
	if err := m.ParseFlags([]string{"--listen", "127.0.0.1:10"}); err != nil {
		t.Fatal(err)
	}
	if m.EventRetention != 42 || m.Listen != "127.0.0.1:10" {
		t.Fatalf("retention %d (env), listen %s (flag wins): %+v", m.EventRetention, m.Listen, m)
	}
	m = NewMain(io.Discard)
	if err := m.ParseFlags([]string{"--plain", "tail,json"}); err != nil || !m.Plain[fastpath.JSON] || !m.Plain[fastpath.Tail] || len(m.Plain) != 2 {
		t.Fatalf("--plain tail,json: %v, %v", m.Plain, err)
	}
	m = NewMain(io.Discard)
	if err := m.ParseFlags([]string{"--insecure-registry", "127.0.0.1:5000,reg.test", "--insecure-registry", "x:1"}); err != nil ||
		strings.Join(m.InsecureRegistries, " ") != "127.0.0.1:5000 reg.test x:1" {
		t.Fatalf("--insecure-registry: %v, %v", m.InsecureRegistries, err)
	}
	m = NewMain(io.Discard)
	if err := m.ParseFlags([]string{"--oci-warm-pool-image", "reg.test/py:3.12=2, reg.test/node@sha256:" + strings.Repeat("a", 64) + "=1",
		"--oci-warm-pool-template", "tools@2=3", "--oci-warm-pool-image", "tools=1"}); err != nil ||
		fmt.Sprint(m.OCIImagePools) != "[{reg.test/py:3.12 false 2} {reg.test/node@sha256:"+strings.Repeat("a", 64)+" false 1} {tools@2 true 3} {tools false 1}]" {
		t.Fatalf("--oci-warm-pool-image, --oci-warm-pool-template: %v, %v", m.OCIImagePools, err)
	}
	m = NewMain(io.Discard)
	if err := m.ParseFlags([]string{"--preview-listen", "127.0.0.1:0", "--preview-domain", "preview.example", "--port-response-timeout", "5s"}); err != nil ||
		m.Ports.PreviewListen != "127.0.0.1:0" || m.Ports.PreviewDomain != "preview.example" || m.Ports.ResponseTimeout != 5*time.Second {
		t.Fatalf("preview flags: %+v, %v", m.Ports, err)
	}
	bads := [][]string{{"--preview-domain", "preview.example"}, {"--preview-listen", "nowhere"}, {"--port-response-timeout", "0s"},
		{"--preview-listen", "127.0.0.1:0", "--preview-domain", "Upper.Example"}, {"--insecure-registry", "host/path"}, {"--event-retention", "0"}, {"--nope"}, {"extra"}, {"--oci-warm-pool", "-1"}, {"--oci-spares", "-1"}, {"--oci-warm-pool-image", "reg.test/py"}, {"--oci-warm-pool-image", "reg.test/py=0"},
		{"--oci-warm-pool-image", "reg.test/py=1001"}, {"--oci-warm-pool-image", "Not A Reference=1"}, {"--oci-warm-pool-template", "Not/A/Name=1"},
		{"--oci-warm-pool-image", "a=1,a=2"}, {"--plain", "jsn"}}
	// The library path of validation is only in a build with -tags plainschema.
	if m := NewMain(io.Discard); plainSchemas == nil {
		bads = append(bads, []string{"--plain", "schema"}, []string{"--plain", "all"})
	} else if err := m.ParseFlags([]string{"--plain", "all"}); err != nil || !m.Plain[fastpath.Schema] {
		t.Fatalf("--plain all in a build with the library path: %v, %v", m.Plain, err)
	}
	for _, bad := range bads {
		if err := NewMain(io.Discard).ParseFlags(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	t.Setenv("SANDBOXD_EVENT_RETENTION", "many")
	if err := NewMain(io.Discard).ParseFlags(nil); err == nil {
		t.Error("a bad environment value was accepted")
	}
	t.Setenv("SANDBOXD_EVENT_RETENTION", "42")
	t.Setenv("SANDBOXD_AGENT_PLAIN", "transport,json") // the agent client's plain paths: transport, exec
	if err := NewMain(io.Discard).ParseFlags(nil); err == nil {
		t.Error("an agent path the client does not know was accepted")
	}
	t.Setenv("SANDBOXD_AGENT_PLAIN", "transport,exec")
	if err := NewMain(io.Discard).ParseFlags(nil); err != nil {
		t.Errorf("both plain paths: %v", err)
	}
	t.Setenv("SANDBOXD_AGENT_PLAIN", "")
	m = NewMain(io.Discard)
	if err := m.ParseFlags([]string{"--provider", "warp"}); err != nil {
		t.Fatal(err)
	}
	m.DataDir = t.TempDir()
	if err := m.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "unknown provider") {
		m.Close()
		t.Fatalf("unknown provider: %v", err)
	}
	m.Close()
}

func TestVersionAndUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, &errOut); err != nil || !strings.HasPrefix(out.String(), "sandboxd ") {
		t.Fatalf("version: %v %q", err, out.String())
	}
	if err := run(context.Background(), []string{"frobnicate"}, &out, &errOut); err == nil || !strings.Contains(errOut.String(), "unknown command") {
		t.Fatalf("unknown command: %v %q", err, errOut.String())
	}
}

// TestREADMEListsTheProviders keeps the README's row of --provider to the values the flag takes.
func TestREADMEListsTheProviders(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(readme)) {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || strings.TrimSpace(cells[1]) != "`--provider`" {
			continue
		}
		var listed []string
		for _, v := range strings.Split(cells[3], ",") {
			listed = append(listed, strings.Trim(strings.TrimSpace(v), "`"))
		}
		if !slices.Equal(listed, providerNames()) {
			t.Errorf("README.md's --provider row lists %q; the flag takes %q", listed, providerNames())
		}
		return
	}
	t.Fatal("README.md has no row for --provider")
}

// TestDefaultBuildIsLean keeps client-go out of the default binary: it is also the agent started in every
// oci sandbox, and client-go's package initialisation alone costs milliseconds at each start. So does
// prometheus/client_golang's (1.1-2.2 ms: docs/design/metrics.md), whose place internal/metrics takes.
func TestDefaultBuildIsLean(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, heavy := range []string{"k8s.io/", "github.com/getkin/kin-openapi", "github.com/santhosh-tekuri/jsonschema", "github.com/prometheus/", "google.golang.org/protobuf"} {
		if strings.Contains(string(out), heavy) {
			t.Errorf("the default sandboxd build depends on %s", heavy)
		}
	}
	out, err = exec.Command("go", "list", "-tags", "kubernetes", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "github.com/sandboxd/sandbox/provider/kubernetes") {
		t.Error("-tags kubernetes does not build the kubernetes provider in")
	}
	out, err = exec.Command("go", "list", "-tags", "plainschema", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "github.com/sandboxd/sandbox/internal/schema/plain") {
		t.Error("-tags plainschema does not build the library path of validation in")
	}
}
