// Package deptest checks what a package is built from, so that a layering rule of the module is a test
// that fails when an import breaks it, naming the rule and the imports that lead to the forbidden
// package (after Tailscale's tstest/deptest). It asks `go list -deps`, so a rule holds for the platform
// and build tags the package is built for, and its tests' own imports never count.
package deptest

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// DepChecker forbids dependencies of one package or binary on one platform. It lists the packages of a
// static build (CGO_ENABLED=0), as the module's binaries are built.
type DepChecker struct {
	Package string   // as `go list` takes it: an import path, or a directory relative to the test's own
	GOOS    string   // empty: the host's
	GOARCH  string   // empty: the host's
	Tags    []string // build tags

	// BadDeps maps a forbidden import path to why it is forbidden. A path ending in "/..." forbids the
	// packages below it too, as in a go pattern. The checked package itself never counts.
	BadDeps map[string]string
}

// Check fails t for each entry of BadDeps the checked package breaks, naming the nearest package the
// entry forbids, why it is forbidden, and the imports through which it came in.
func (c DepChecker) Check(t testing.TB) {
	t.Helper()
	goos, goarch := cmp.Or(c.GOOS, runtime.GOOS), cmp.Or(c.GOARCH, runtime.GOARCH)
	for bad := range c.BadDeps {
		if strings.Contains(strings.TrimSuffix(bad, "/..."), "...") {
			t.Fatalf("bad dependency %q: only a trailing /... is a pattern", bad)
		}
	}
	cmd := exec.Command("go", "list", "-deps", "-tags="+strings.Join(c.Tags, ","),
		"-f", "{{if .DepOnly}}-{{else}}+{{end}} {{.ImportPath}}{{range .Imports}} {{.}}{{end}}", c.Package)
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s (%s/%s): %v\n%s", c.Package, goos, goarch, err, stderr.Bytes())
	}
	root, imports, err := parseList(out)
	if err != nil {
		t.Fatalf("go list -deps %s (%s/%s): %v", c.Package, goos, goarch, err)
	}
	order, from := walk(imports, root)
	reported := map[string]bool{}
	for _, dep := range order[1:] {
		bad, ok := forbidden(c.BadDeps, dep)
		if !ok || reported[bad] {
			continue
		}
		reported[bad] = true // the nearest package a pattern forbids says enough
		var chain []string
		for p := dep; p != ""; p = from[p] {
			chain = append(chain, p)
		}
		slices.Reverse(chain)
		if chain[0] != root {
			chain = append([]string{root, "(not through its imports)"}, chain...)
		}
		t.Errorf("%s (%s/%s) depends on %s: %s\n\timported through %s",
			root, goos, goarch, dep, c.BadDeps[bad], strings.Join(chain, " -> "))
	}
}

// parseList reads the lines of `go list -deps` as Check formats them: "+" or "-" (the named package,
// or a dependency), the import path, then the package's imports.
func parseList(out []byte) (root string, imports map[string][]string, err error) {
	imports = map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			return "", nil, fmt.Errorf("unexpected line %q", line)
		}
		imports[f[1]] = f[2:]
		if f[0] == "+" {
			if root != "" {
				return "", nil, fmt.Errorf("check one package at a time, not %s and %s", root, f[1])
			}
			root = f[1]
		}
	}
	if root == "" {
		return "", nil, fmt.Errorf("no package listed")
	}
	return root, imports, nil
}

// forbidden reports the key of bad that forbids dep, if one does.
func forbidden(bad map[string]string, dep string) (string, bool) {
	if _, ok := bad[dep]; ok {
		return dep, true
	}
	for d := dep; ; {
		if _, ok := bad[d+"/..."]; ok {
			return d + "/...", true
		}
		i := strings.LastIndexByte(d, '/')
		if i < 0 {
			return "", false
		}
		d = d[:i]
	}
}

// walk lists root and the packages it imports, nearest first, with the importer through which each was
// first reached. A listed package the imports do not reach comes last, with no importer.
func walk(imports map[string][]string, root string) (order []string, from map[string]string) {
	from = map[string]string{root: ""}
	order = []string{root}
	for i := 0; i < len(order); i++ {
		for _, q := range imports[order[i]] {
			if _, seen := from[q]; !seen {
				from[q] = order[i]
				order = append(order, q)
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(imports)) {
		if _, seen := from[p]; !seen {
			from[p] = ""
			order = append(order, p)
		}
	}
	return order, from
}
