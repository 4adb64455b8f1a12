package sandbox_test

import (
	"maps"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/deptest"
)

const module = "github.com/sandboxd/sandbox"

// inSandbox fences what runs inside every sandbox. `sandboxd agent`, the daemon's own static binary, is
// each sandbox's PID 1, and the agent's server, its wire protocol, proc and fsroot are what it runs
// there: they answer the daemon and keep no state, so none of the daemon's machinery belongs in them,
// and whatever they pull in is initialised at every sandbox start.
var inSandbox = map[string]string{
	"modernc.org/sqlite/...":      "the store is the daemon's: a sandbox's PID 1 keeps no database",
	module + "/store/...":         "the store is the daemon's: a sandbox's PID 1 keeps no database",
	module + "/httpapi/...":       "the API is served by the daemon, never from inside a sandbox",
	module + "/core":              "the runtime core runs in the daemon; the agent only answers it",
	module + "/client":            "the agent answers the daemon; it never calls the API",
	module + "/agent/agentclient": "the agent answers the daemon's client of it; it is no client of an agent itself",
	"k8s.io/...":                  "client-go's package initialisation alone costs milliseconds at every sandbox start",
	module + "/cmd/...":           "a command's flags and wiring are its own, not a library's",
}

// daemonSide fences the daemon's side of the agent: its client, the providers that reach their
// sandboxes through it, and the core and the API above them. They speak agent/protocol to an agent;
// the agent's server and what it runs commands and confines files with are the sandbox's, so that a
// provider talking to an agent never builds them in, nor reaches around the wire into them.
var daemonSide = map[string]string{
	module + "/agent":  "the agent's server runs inside the sandbox; the daemon reaches it through agent/agentclient",
	module + "/proc":   "commands run inside the sandbox, by the agent; the daemon's side only asks for them",
	module + "/fsroot": "files are confined inside the sandbox, by the agent; the daemon's side only asks for them",
}

// shared fences agent/protocol and internal/agentwire, which both sides of the wire build on: they hold
// the code of neither.
var shared = union(inSandbox, daemonSide)

func union(fences ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, f := range fences {
		maps.Copy(out, f)
	}
	return out
}

// bench fences cmd/sbxbench: it measures the daemon from outside, through the API a client sees, against
// floors it builds with the agent and the oci provider's exported API. Reaching into the store or the
// API's internals would measure what no client sees. The Go client (which decodes answers with
// internal/jsondoc) is a client like any other: the image cases drive imports, snapshots and forks with it.
var bench = map[string]string{
	"modernc.org/sqlite/...":          "the benchmark reaches the store only through the daemon's API",
	module + "/store/...":             "the benchmark reaches the store only through the daemon's API",
	module + "/httpapi/...":           "the benchmark is a client of the API, not a part of it",
	module + "/internal/schema/...":   "the API's request validator is the daemon's; the benchmark times it from outside",
	module + "/core":                  "the benchmark drives the core only through the daemon's API",
	module + "/provider/host":         "the benchmark starts a daemon for the host provider; it runs none itself",
	module + "/provider/fault":        "fault injection is for tests",
	module + "/provider/providertest": "the conformance suite is for tests",
	module + "/provider/kubernetes":   "the kubernetes provider needs a cluster the benchmark does not have",
	"k8s.io/...":                      "the kubernetes provider needs a cluster the benchmark does not have",
}

// domain fences the module's root package: the types and interfaces every other package builds on.
var domain = map[string]string{
	module + "/...": "the domain is what the rest of the module builds on; it imports none of it",
	"net/http/...":  "HTTP is a transport, the business of httpapi and client",
}

// TestDeps checks each fence on every platform its package is built for (go list -deps, CGO_ENABLED=0).
func TestDeps(t *testing.T) {
	for _, f := range []struct {
		name, dir string
		platforms []string
		bad       map[string]string
	}{
		{"agent", "./agent", []string{"linux/amd64", "linux/arm64"}, inSandbox},
		{"agent/protocol", "./agent/protocol", []string{"linux/amd64", "linux/arm64"}, shared},
		{"internal/agentwire", "./internal/agentwire", []string{"linux/amd64", "linux/arm64"}, shared},
		{"agent/agentclient", "./agent/agentclient", []string{"linux/amd64", "linux/arm64"}, daemonSide},
		{"internal/agenthttp", "./internal/agenthttp", []string{"linux/amd64", "linux/arm64"}, daemonSide},
		{"provider/oci", "./provider/oci", []string{"linux/amd64", "linux/arm64"}, daemonSide},
		{"provider/kubernetes", "./provider/kubernetes", []string{"linux/amd64"}, daemonSide},
		{"core", "./core", []string{"linux/amd64"}, daemonSide},
		{"httpapi", "./httpapi", []string{"linux/amd64"}, daemonSide},
		{"proc", "./proc", []string{"linux/amd64", "linux/arm64"}, inSandbox},
		{"fsroot", "./fsroot", []string{"linux/amd64", "linux/arm64"}, inSandbox},
		{"sbxbench", "./cmd/sbxbench", []string{"linux/amd64"}, bench},
		{"sandbox", ".", []string{"linux/amd64", "darwin/arm64"}, domain},
	} {
		for _, platform := range f.platforms {
			t.Run(f.name+"/"+platform, func(t *testing.T) {
				goos, goarch, _ := strings.Cut(platform, "/")
				deptest.DepChecker{Package: f.dir, GOOS: goos, GOARCH: goarch, BadDeps: f.bad}.Check(t)
			})
		}
	}
}
