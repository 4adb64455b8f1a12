package httpapi

import (
	"errors"
	"slices"
	"testing"

	"github.com/sandboxd/sandbox"
)

// FuzzTerminalControl: any bytes a client sends as a control frame are refused with ErrInvalidRequest
// or give a resize to a size a terminal can have, or a signal a process may be sent.
func FuzzTerminalControl(f *testing.F) {
	for _, seed := range []string{`{"type":"resize","rows":24,"cols":80}`, `{"type":"signal","signal":"SIGINT"}`,
		`{"type":"signal","signal":"KILL"}`, `{"type":"resize","rows":0,"cols":80}`, `{"type":"resize","rows":65536,"cols":1}`,
		`{"type":"resize","rows":24,"cols":80,"x":1}`, `{"type":"launch"}`, `{`, `[]`, `null`, `{"type":"signal","signal":"SIGSIGINT"}`,
		`{"type":"resize","rows":1e3,"cols":2}`, `{"type":"resize"} {}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseControl(b)
		if err != nil {
			if !errors.Is(err, sandbox.ErrInvalidRequest) {
				t.Fatalf("%q: unclassified %v", b, err)
			}
			return
		}
		switch c.Type {
		case "resize":
			if c.Rows < 1 || c.Rows > 65535 || c.Cols < 1 || c.Cols > 65535 {
				t.Fatalf("%q: accepted %+v", b, c)
			}
		case "signal":
			if !slices.Contains(sandbox.ProcessSignals, c.Signal) {
				t.Fatalf("%q: accepted %+v", b, c)
			}
		default:
			t.Fatalf("%q: accepted %+v", b, c)
		}
	})
}
