package agentwire

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// FuzzDecode: what Encode makes, Decode reads back as it was; any other input is either refused as a
// protocol error or accepted with streams that are exactly the bytes after the head, each within its
// cap.
func FuzzDecode(f *testing.F) {
	f.Add("out", "err\x00\n", 1, 16, "")
	f.Add("", "", 0, 0, `{"exitCode":0,"stdoutBytes":1,"stderrBytes":0,"startedAt":"2024-01-01T00:00:00Z","finishedAt":"2024-01-01T00:00:00Z"}`+"\nx")
	f.Add("", "", 0, 4, `{"stdoutBytes":-1,"stderrBytes":2}`+"\nx")
	f.Add("", "", 0, 4, `{"stdoutBytes":1}{}`+"\nx")
	f.Add("", "", 0, 4, "no head")
	f.Fuzz(func(t *testing.T, stdout, stderr string, code, m int, raw string) {
		m = max(m%(1<<20), 0)
		started := time.Unix(1700000000, 0).UTC()
		o := protocol.ExecOutput{ExecStatus: protocol.ExecStatus{ExitCode: &code, StartedAt: started, FinishedAt: started.Add(time.Second)},
			Stdout: stdout, Stderr: stderr}
		parts, err := Encode(o)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(strings.Join(parts[:], ""), max(m, len(stdout), len(stderr)))
		if err != nil || got.Stdout != stdout || got.Stderr != stderr || got.ExitCode == nil || *got.ExitCode != code ||
			!got.StartedAt.Equal(o.StartedAt) || !got.FinishedAt.Equal(o.FinishedAt) {
			t.Fatalf("round trip of %+v: %+v, %v", o, got, err)
		}

		got, err = Decode(raw, m)
		if err != nil {
			if !errors.Is(err, sandbox.ErrProviderProtocol) {
				t.Fatalf("%q: unclassified error %v", raw, err)
			}
			return
		}
		nl := strings.IndexByte(raw, '\n')
		if nl < 0 || nl >= MaxHeadBytes || len(got.Stdout) > m || len(got.Stderr) > m || got.Stdout+got.Stderr != raw[nl+1:] {
			t.Fatalf("%q (cap %d): accepted %q and %q", raw, m, got.Stdout, got.Stderr)
		}
	})
}
