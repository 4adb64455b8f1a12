// Package agentwire is the compact form of the agent's answer to an exec (docs/design/agentwire.md):
// the command's status as one line of JSON, then its stdout and its stderr as they are. The JSON
// answer (protocol.ExecResult) carries both streams in base64, which a megabyte of output makes slow
// to encode and slower to decode. The agent (package agent) encodes it for a client that asks for
// MediaType; the client (agent/agentclient) decodes it.
//
// Main invariant: Decode accepts only an answer whose head announces exactly the bytes that follow it,
// each stream within its cap; anything else is sandbox.ErrProviderProtocol.
package agentwire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// MediaType names the compact answer, in the request's Accept and the answer's Content-Type. An agent
// that does not know it answers an ExecResult in JSON, and the client takes either.
const MediaType = "application/vnd.sandboxd.exec-result"

// MaxHeadBytes bounds the head line with its newline (a Head is some 250 bytes).
const MaxHeadBytes = 4 << 10

// Head is the first line of a compact answer, followed by StdoutBytes bytes of stdout and StderrBytes
// bytes of stderr.
type Head struct {
	protocol.ExecStatus
	StdoutBytes int `json:"stdoutBytes"`
	StderrBytes int `json:"stderrBytes"`
}

// Encode returns the compact answer of o in its three parts, to be sent one after the other: the
// head line, stdout, stderr.
func Encode(o protocol.ExecOutput) ([3]string, error) {
	head, err := json.Marshal(Head{ExecStatus: o.ExecStatus, StdoutBytes: len(o.Stdout), StderrBytes: len(o.Stderr)})
	if err != nil {
		return [3]string{}, err
	}
	// json.Marshal escapes every newline inside the document.
	return [3]string{string(head) + "\n", o.Stdout, o.Stderr}, nil
}

// MaxBytes bounds a compact answer whose streams are capped at m bytes each.
func MaxBytes(m int) int64 { return MaxHeadBytes + 2*int64(m) }

// Decode reads the compact answer raw, whose streams are capped at m bytes each. Stdout and stderr are
// cut from raw, not copied: a megabyte of output is not copied again to become the strings the daemon
// answers with. A malformed answer, or one past a bound, is sandbox.ErrProviderProtocol.
func Decode(raw string, m int) (protocol.ExecOutput, error) {
	if limit := MaxBytes(m); int64(len(raw)) > limit {
		return protocol.ExecOutput{}, bad("%d bytes past %d", len(raw), limit)
	}
	nl := strings.IndexByte(raw[:min(len(raw), MaxHeadBytes)], '\n')
	if nl < 0 {
		return protocol.ExecOutput{}, bad("no head line in its first %d bytes", MaxHeadBytes)
	}
	var head Head
	dec := json.NewDecoder(bytes.NewReader([]byte(raw[:nl])))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&head); err != nil {
		return protocol.ExecOutput{}, bad("head: %v", err)
	}
	if dec.More() {
		return protocol.ExecOutput{}, bad("head has trailing data")
	}
	out := raw[nl+1:]
	if head.StdoutBytes < 0 || head.StderrBytes < 0 || head.StdoutBytes > m || head.StderrBytes > m ||
		head.StdoutBytes+head.StderrBytes != len(out) {
		return protocol.ExecOutput{}, bad("%d+%d bytes of output announced, %d sent, at most %d a stream",
			head.StdoutBytes, head.StderrBytes, len(out), m)
	}
	n := head.StdoutBytes
	return protocol.ExecOutput{ExecStatus: head.ExecStatus, Stdout: out[:n], Stderr: out[n:]}, nil
}

func bad(format string, args ...any) error {
	return fmt.Errorf("answer: "+format+": %w", append(args, sandbox.ErrProviderProtocol)...)
}
