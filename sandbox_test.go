package sandbox_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandbox"
)

func TestNewIDIsURLSafeAndUnique(t *testing.T) {
	re := regexp.MustCompile(`^sbx_[a-z2-7]{20}$`)
	seen := make(map[sandbox.ID]bool)
	for range 1000 {
		id := sandbox.NewID()
		if !re.MatchString(string(id)) {
			t.Fatalf("id %q is not sbx_ and 20 base32 characters", id)
		}
		if seen[id] {
			t.Fatalf("id %q repeated", id)
		}
		seen[id] = true
	}
}

func TestCanonicalJSONIgnoresKeyOrderAndSpace(t *testing.T) {
	a := sandbox.Spec{ClientRequestID: "k", Extensions: map[string]json.RawMessage{
		"acme.x": json.RawMessage(`{"b": 1, "a": [1, 2.50]}`),
	}}
	b := sandbox.Spec{ClientRequestID: "k", Extensions: map[string]json.RawMessage{
		"acme.x": json.RawMessage(`{"a":[1,2.50],"b":1}`),
	}}
	ca, err := a.CanonicalJSON()
	if err != nil {
		t.Fatal(err)
	}
	cb, err := b.CanonicalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if string(ca) != string(cb) {
		t.Fatalf("canonical forms differ:\n%s\n%s", ca, cb)
	}
	c := sandbox.Spec{ClientRequestID: "k", Image: "debian"}
	cc, _ := c.CanonicalJSON()
	if string(cc) == string(ca) {
		t.Fatal("different specs have the same canonical form")
	}
}

func TestErrorClasses(t *testing.T) {
	for _, c := range sandbox.ErrorClasses {
		wrapped := fmt.Errorf("context: %w", c.Err)
		if got := sandbox.ClassOf(wrapped); got.Code != c.Code {
			t.Errorf("%v: class %+v, want %+v", c.Err, got, c)
		}
		if !errors.Is(sandbox.ErrorForCode(c.Code), c.Err) {
			t.Errorf("code %s does not map back to %v", c.Code, c.Err)
		}
	}
	if got := sandbox.ClassOf(errors.New("boom")); got.Code != sandbox.CodeInternal {
		t.Errorf("unclassified error: %+v", got)
	}
}

func TestTruncateUTF8NeverSplitsARune(t *testing.T) {
	s := "aé€😀"
	for n := 0; n <= len(s); n++ {
		got := sandbox.TruncateUTF8(s, n)
		if len(got) > n {
			t.Fatalf("n=%d: %d bytes", n, len(got))
		}
		if !json.Valid([]byte(fmt.Sprintf("%q", got))) || !utf8.ValidString(got) {
			t.Fatalf("n=%d: split a rune: %q", n, got)
		}
	}
}

func TestObservationValidate(t *testing.T) {
	ref := sandbox.Ref{ID: "sbx_a", Generation: 2}
	good := sandbox.Observation{Ref: ref, State: sandbox.ObservedReady}
	if err := good.Validate(ref); err != nil {
		t.Fatal(err)
	}
	bad := []sandbox.Observation{
		{Ref: sandbox.Ref{ID: "sbx_a", Generation: 1}, State: sandbox.ObservedReady},
		{Ref: ref, State: "exploded"},
		{Ref: ref, State: sandbox.ObservedFailed},
		{Ref: ref, State: sandbox.ObservedReady, Endpoint: &sandbox.Endpoint{}},
		{Ref: ref, State: sandbox.ObservedReady, Extensions: map[string]json.RawMessage{"x": json.RawMessage("{")}},
	}
	for _, o := range bad {
		if err := o.Validate(ref); !errors.Is(err, sandbox.ErrProviderProtocol) {
			t.Errorf("%+v: got %v, want ErrProviderProtocol", o, err)
		}
	}
}

func TestCommandResultValidate(t *testing.T) {
	cmd := sandbox.Command{Argv: []string{"true"}, MaxOutputBytes: 4}
	zero, big := 0, 300
	now := time.Now()
	good := sandbox.CommandResult{ExitCode: &zero, StartedAt: now, FinishedAt: now}
	if err := good.Validate(cmd); err != nil {
		t.Fatal(err)
	}
	timedOut := sandbox.CommandResult{TimedOut: true, StartedAt: now, FinishedAt: now}
	if err := timedOut.Validate(cmd); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]sandbox.CommandResult{
		"exit code on timeout": {ExitCode: &zero, TimedOut: true, StartedAt: now, FinishedAt: now},
		"no exit code":         {StartedAt: now, FinishedAt: now},
		"exit code range":      {ExitCode: &big, StartedAt: now, FinishedAt: now},
		"exit code on cancel":  {ExitCode: &zero, Cancelled: true, StartedAt: now, FinishedAt: now},
		"output past cap":      {ExitCode: &zero, Stdout: "12345", StartedAt: now, FinishedAt: now},
		"stderr past cap":      {ExitCode: &zero, Stderr: "12345", StartedAt: now, FinishedAt: now},
		"no start time":        {ExitCode: &zero},
		"ends before start":    {ExitCode: &zero, StartedAt: now, FinishedAt: now.Add(-time.Second)},
	} {
		if err := r.Validate(cmd); !errors.Is(err, sandbox.ErrProviderProtocol) {
			t.Errorf("%s: got %v, want ErrProviderProtocol", name, err)
		}
	}
}

func TestCommandNormalize(t *testing.T) {
	argv := []string{"true"}
	for _, c := range []struct {
		name    string
		in      sandbox.Command
		timeout time.Duration
		max     int
		err     error
	}{
		{"defaults", sandbox.Command{Argv: argv}, sandbox.DefaultCommandTimeout, sandbox.DefaultMaxOutputBytes, nil},
		{"negative means default", sandbox.Command{Argv: argv, Timeout: -1, MaxOutputBytes: -1}, sandbox.DefaultCommandTimeout, sandbox.DefaultMaxOutputBytes, nil},
		{"kept", sandbox.Command{Argv: argv, Timeout: time.Nanosecond, MaxOutputBytes: 1}, time.Nanosecond, 1, nil},
		{"at the maxima", sandbox.Command{Argv: argv, Timeout: sandbox.MaxCommandTimeout, MaxOutputBytes: sandbox.MaxMaxOutputBytes}, sandbox.MaxCommandTimeout, sandbox.MaxMaxOutputBytes, nil},
		{"cwd at its bound", sandbox.Command{Argv: argv, Cwd: strings.Repeat("d", sandbox.MaxCwdBytes)}, sandbox.DefaultCommandTimeout, sandbox.DefaultMaxOutputBytes, nil},
		{"argv at its bound", sandbox.Command{Argv: []string{strings.Repeat("a", sandbox.MaxArgvEnvBytes-1)}}, sandbox.DefaultCommandTimeout, sandbox.DefaultMaxOutputBytes, nil},
		{"no argv", sandbox.Command{}, 0, 0, sandbox.ErrInvalidRequest},
		{"timeout past the maximum", sandbox.Command{Argv: argv, Timeout: sandbox.MaxCommandTimeout + 1}, 0, 0, sandbox.ErrInvalidRequest},
		{"cap past the maximum", sandbox.Command{Argv: argv, MaxOutputBytes: sandbox.MaxMaxOutputBytes + 1}, 0, 0, sandbox.ErrInvalidRequest},
		{"cwd past its bound", sandbox.Command{Argv: argv, Cwd: strings.Repeat("d", sandbox.MaxCwdBytes+1)}, 0, 0, sandbox.ErrInvalidRequest},
		{"argv past its bound", sandbox.Command{Argv: []string{strings.Repeat("a", sandbox.MaxArgvEnvBytes)}}, 0, 0, sandbox.ErrInvalidRequest},
		{"env past its bound", sandbox.Command{Argv: argv, Env: map[string]string{"A": strings.Repeat("v", sandbox.MaxArgvEnvBytes)}}, 0, 0, sandbox.ErrInvalidRequest},
	} {
		got, err := c.in.Normalize()
		if !errors.Is(err, c.err) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.err)
			continue
		}
		if err != nil {
			continue
		}
		if got.Timeout != c.timeout || got.MaxOutputBytes != c.max {
			t.Errorf("%s: timeout %v, cap %d; want %v, %d", c.name, got.Timeout, got.MaxOutputBytes, c.timeout, c.max)
		}
		if again, err := got.Normalize(); err != nil || again.Timeout != got.Timeout || again.MaxOutputBytes != got.MaxOutputBytes {
			t.Errorf("%s: normalising twice gives %+v, %v", c.name, again, err)
		}
	}
}
