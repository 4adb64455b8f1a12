package client

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/jsondoc"
)

// Answers that can carry megabytes in one string, a file's base64 or a command's output, decode
// themselves from the whole body with jsondoc, which takes such a string in one pass; encoding/json
// scans it twice and copies it rune by rune. The result is what encoding/json would give for the
// contract's documents: a member that is missing or null leaves its field zero, a member of another
// type is an error, other members are ignored.
//
// It is kept because it buys well over a tenth of what a caller waits for: BenchmarkReadFile1MiB and
// BenchmarkExec1MiB run both ways (docs/design/json-parser.md has the figures). With SANDBOXD_PLAIN=json
// the client decodes these answers with encoding/json as well.

// bodyDecoder is an answer that decodes itself from its whole body.
type bodyDecoder interface {
	decodeBody(body []byte) error
}

func (fc *fileContent) decodeBody(body []byte) error {
	f, err := members(body)
	if err != nil {
		return err
	}
	fc.Path = f.str("path")
	fc.ContentBase64 = f.str("contentBase64")
	fc.Size = f.int("size")
	return f.err
}

// commandResult is a CommandResult that decodes itself.
type commandResult struct {
	sandbox.CommandResult
}

func (r *commandResult) decodeBody(body []byte) error {
	f, err := members(body)
	if err != nil {
		return err
	}
	if f.m["exitCode"] != nil {
		code := int(f.int("exitCode"))
		r.ExitCode = &code
	}
	r.Stdout, r.Stderr = f.str("stdout"), f.str("stderr")
	r.TimedOut, r.Cancelled, r.Truncated = f.bool("timedOut"), f.bool("cancelled"), f.bool("truncated")
	r.StartedAt, r.FinishedAt = f.time("startedAt"), f.time("finishedAt")
	return f.err
}

// fields reads the members of one object, keeping the first error.
type fields struct {
	m   map[string]any
	err error
}

func members(body []byte) (*fields, error) {
	doc, err := jsondoc.Decode(body)
	if err != nil {
		return nil, err
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the answer is not an object")
	}
	return &fields{m: m}, nil
}

// get returns member k as a T; false when it is missing or null (or already failed).
func get[T any](f *fields, k, what string) (T, bool) {
	var zero T
	v := f.m[k]
	if v == nil || f.err != nil {
		return zero, false
	}
	t, ok := v.(T)
	if !ok {
		f.err = fmt.Errorf("member %q: %T, not %s", k, v, what)
	}
	return t, ok
}

func (f *fields) str(k string) string {
	s, _ := get[string](f, k, "a string")
	return s
}

func (f *fields) bool(k string) bool {
	b, _ := get[bool](f, k, "a boolean")
	return b
}

func (f *fields) int(k string) int64 {
	n, ok := get[json.Number](f, k, "a number")
	if !ok {
		return 0
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		f.err = fmt.Errorf("member %q: %s is not an integer", k, n)
	}
	return i
}

func (f *fields) time(k string) time.Time {
	s, ok := get[string](f, k, "a string")
	if !ok {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		f.err = fmt.Errorf("member %q: %v", k, err)
	}
	return t
}
