package httpapi

import (
	"os/exec"
	"strings"
	"testing"
)

// heavyImports are the modules whose package init costs milliseconds at every process start (the
// JSON Schema metaschemas compiled by santhosh-tekuri/jsonschema): tests may use them as a
// reference, no package of the default build may.
var heavyImports = []string{"github.com/getkin/kin-openapi", "github.com/santhosh-tekuri/jsonschema"}

// outsideTheDefaultBuild are the module's packages no binary links by default: those imported by tests
// alone, and the library path of request validation, which the daemon links only when built with
// -tags plainschema (docs/design/request-validation.md).
var outsideTheDefaultBuild = map[string]bool{
	"github.com/sandboxd/sandbox/httpapi/apitest":              true,
	"github.com/sandboxd/sandbox/internal/testenv/processtest": true,
	"github.com/sandboxd/sandbox/internal/testenv/filetest":    true,
	"github.com/sandboxd/sandbox/internal/schema/plain":        true,
}

// TestNoHeavyImports: neither the daemon nor any other package of the module's default build depends
// on kin-openapi or santhosh-tekuri/jsonschema.
func TestNoHeavyImports(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("the go command is needed to list the module's imports: %v", err)
	}
	// Every non-test package of the module and its dependencies, one "importer: dependency" line each.
	out, err := exec.Command("go", "list", "-f", `{{$p := .ImportPath}}{{range .Deps}}{{$p}}: {{.}}
{{end}}`, "github.com/sandboxd/sandbox/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, dep, ok := strings.Cut(line, ": ")
		if !ok || outsideTheDefaultBuild[pkg] {
			continue
		}
		checked[pkg] = true
		for _, heavy := range heavyImports {
			if dep == heavy || strings.HasPrefix(dep, heavy+"/") {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
	for _, must := range []string{"github.com/sandboxd/sandbox/cmd/sandboxd", "github.com/sandboxd/sandbox/httpapi"} {
		if !checked[must] {
			t.Errorf("%s was not checked: go list printed no dependencies for it", must)
		}
	}
}
