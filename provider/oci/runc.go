package oci

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// runc drives the runtime binary with its own state root, so that two providers on different state
// directories never see each other's containers. Its class says which runtime the binary is, and so
// which flags it takes (runtime.go).
type runc struct {
	path  string
	root  string
	class runtimeClass
}

// containerState is the part of `runc state` the provider reads.
type containerState struct {
	ID     string `json:"id"`
	Pid    int    `json:"pid"`
	Status string `json:"status"` // created, running, paused, stopped
}

var errNoContainer = errors.New("no such container")

// id names the container name of this runtime root apart from those of other roots.
func (r runc) id(name string) string { return r.root + "\x00" + name }

func (r runc) cmd(ctx context.Context, logFile string, args ...string) *exec.Cmd {
	full := []string{"--root", r.root}
	if r.class == classGVisor {
		full = append(full, gvisorFlags...)
	}
	if logFile != "" {
		full = append(full, "--log", logFile, "--log-format", "json")
	}
	return exec.CommandContext(ctx, r.path, append(full, args...)...)
}

// gvisorFlags are the global flags runsc gets on every call (only those that start a sandbox read
// them): no network but loopback, as runc's empty network namespace; a unix socket the sandbox binds
// in a host directory bound into it made on the host (the agent's, runtime.go), while connecting to
// one stays refused; and the spec's seccomp filter applied by gVisor's kernel to the sandbox's
// processes, which runsc otherwise ignores. The platform is the build's default (systrap; ptrace in
// older builds): neither needs KVM.
var gvisorFlags = []string{"--network=none", "--host-uds=create", "--oci-seccomp"}

// run starts the container detached. runc hands its stdio to the container, so it gets a file, never a
// pipe (a pipe would stay open as long as the container lives). files become descriptors 3, 4, … of the
// container's process: on runc the agent's listening socket and its seccomp program; gVisor's sandbox
// takes none (runtime.go).
func (r runc) run(ctx context.Context, l layout, name string, files ...*os.File) error {
	out, err := os.OpenFile(l.agentLog(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	args := []string{"run", "--detach", "--pid-file", l.pidFile(), "--bundle", l.dir, name}
	if len(files) > 0 {
		args = []string{"run", "--detach", "--pid-file", l.pidFile(), "--preserve-fds", strconv.Itoa(len(files)), "--bundle", l.dir, name}
	}
	c := r.cmd(ctx, l.runcLog(), args...)
	c.Stdout, c.Stderr = out, out
	c.ExtraFiles = files
	if err := c.Run(); err != nil {
		return fmt.Errorf("%s run %s: %v: %s", filepath.Base(r.path), name, err, lastLogError(l.runcLog()))
	}
	return nil
}

// simple runs a runc subcommand that does not touch the container's stdio.
func (r runc) simple(ctx context.Context, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	c := r.cmd(ctx, "", args...)
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if strings.Contains(msg, "does not exist") || strings.Contains(msg, "not exist") {
			return nil, fmt.Errorf("runc %s: %s: %w", args[0], msg, errNoContainer)
		}
		return nil, fmt.Errorf("runc %s: %v: %s", args[0], err, msg)
	}
	return stdout.Bytes(), nil
}

// list returns the state of every container on the runtime's root, by name.
func (r runc) list(ctx context.Context) (map[string]containerState, error) {
	out, err := r.simple(ctx, "list", "--format", "json")
	if err != nil {
		return nil, err
	}
	var all []containerState // runc prints null for none
	if err := json.Unmarshal(out, &all); err != nil {
		return nil, fmt.Errorf("runc list: malformed answer %q: %v", out, err)
	}
	byName := make(map[string]containerState, len(all))
	for _, st := range all {
		byName[st.ID] = st
	}
	return byName, nil
}

// state returns the container's state, or errNoContainer.
func (r runc) state(ctx context.Context, name string) (containerState, error) {
	out, err := r.simple(ctx, "state", name)
	if err != nil {
		return containerState{}, err
	}
	var st containerState
	if err := json.Unmarshal(out, &st); err != nil || st.ID != name {
		return containerState{}, fmt.Errorf("runc state %s: malformed answer %q: %v", name, out, err)
	}
	return st, nil
}

// lastLogError returns the last error message of a runtime's JSON log: runc writes an object a line,
// runsc one after the other.
func lastLogError(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var last string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		for {
			var e struct {
				Level string `json:"level"`
				Msg   string `json:"msg"`
			}
			if dec.Decode(&e) != nil {
				break
			}
			if e.Level == "error" || e.Level == "fatal" {
				last = e.Msg
			}
		}
	}
	return last
}

// features is the part of `runc features` the provider reads.
type features struct {
	Linux struct {
		MountExtensions struct {
			IDMap struct {
				Enabled *bool `json:"enabled"`
			} `json:"idmap"`
		} `json:"mountExtensions"`
	} `json:"linux"`
}

// idmapMounts reports whether the runtime makes idmapped mounts (`runc features`, runc 1.2 and later):
// then the host's read-only directories bound into a sandbox show their real owners inside its user
// namespace (root as root) instead of the overflow uid. A runtime without the subcommand has none.
func (r runc) idmapMounts(ctx context.Context) bool {
	out, err := r.simple(ctx, "features")
	if err != nil {
		return false
	}
	var f features
	if json.Unmarshal(out, &f) != nil {
		return false
	}
	e := f.Linux.MountExtensions.IDMap.Enabled
	return e != nil && *e
}
