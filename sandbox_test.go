package sandbox_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
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
		"output past cap":      {ExitCode: &zero, Stdout: "12345", StartedAt: now, FinishedAt: now},
		"no start time":        {ExitCode: &zero},
		"ends before start":    {ExitCode: &zero, StartedAt: now, FinishedAt: now.Add(-time.Second)},
	} {
		if err := r.Validate(cmd); !errors.Is(err, sandbox.ErrProviderProtocol) {
			t.Errorf("%s: got %v, want ErrProviderProtocol", name, err)
		}
	}
}
