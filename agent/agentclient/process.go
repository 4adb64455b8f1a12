package agentclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
	"github.com/sandboxd/sandbox/internal/agenthttp"
)

// waitSlack is how much longer than a long poll's wait its call may take.
const waitSlack = 5 * time.Second

// StartProcess starts a background process (protocol.PathProcesses).
func (c *Client) StartProcess(ctx context.Context, spec sandbox.ProcessSpec) (sandbox.Process, error) {
	body, err := json.Marshal(spec)
	if err != nil {
		return sandbox.Process{}, fmt.Errorf("agent start process: %w", err)
	}
	var p sandbox.Process
	if err := c.callJSON(ctx, http.MethodPost, protocol.PathProcesses, nil, body, protocol.MaxProcessInfoBytes, &p); err != nil {
		return sandbox.Process{}, err
	}
	return p, checkProcess(p)
}

// Processes lists the agent's background processes.
func (c *Client) Processes(ctx context.Context) ([]sandbox.Process, error) {
	var list []sandbox.Process
	if err := c.callJSON(ctx, http.MethodGet, protocol.PathProcesses, nil, nil, protocol.MaxProcesses*protocol.MaxProcessInfoBytes, &list); err != nil {
		return nil, err
	}
	if len(list) > protocol.MaxProcesses {
		return nil, fmt.Errorf("agent %s: %w", protocol.PathProcesses, badAnswer("%d processes past %d", len(list), protocol.MaxProcesses))
	}
	for _, p := range list {
		if err := checkProcess(p); err != nil {
			return nil, err
		}
	}
	if list == nil {
		list = []sandbox.Process{}
	}
	return list, nil
}

// Process returns one process, waiting up to wait for it to end.
func (c *Client) Process(ctx context.Context, pid int, wait time.Duration) (sandbox.Process, error) {
	ctx, cancel := longPoll(ctx, wait)
	defer cancel()
	q := url.Values{"pid": {strconv.Itoa(pid)}, "waitMs": {strconv.FormatInt(wait.Milliseconds(), 10)}}
	var p sandbox.Process
	if err := c.callJSON(ctx, http.MethodGet, protocol.PathProcess, q, nil, protocol.MaxProcessInfoBytes, &p); err != nil {
		return sandbox.Process{}, err
	}
	if p.PID != pid {
		return sandbox.Process{}, fmt.Errorf("agent %s: %w", protocol.PathProcess, badAnswer("process %d for %d", p.PID, pid))
	}
	return p, checkProcess(p)
}

// longPoll bounds a call that waits up to wait on the agent: wait and waitSlack, or ctx's own deadline.
func longPoll(ctx context.Context, wait time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, min(wait, protocol.MaxWait)+waitSlack)
}

// checkProcess refuses a process no agent could have answered.
func checkProcess(p sandbox.Process) error {
	if p.PID <= 0 || len(p.Argv) == 0 || p.OutputOldest < 0 || p.OutputEnd < p.OutputOldest ||
		p.OutputEnd-p.OutputOldest > protocol.JournalBytes || p.Running == (p.ExitCode != nil) || len(p.Tag) > protocol.MaxTagBytes {
		return fmt.Errorf("agent process: %w", badAnswer("malformed process pid %d, output %d-%d", p.PID, p.OutputOldest, p.OutputEnd))
	}
	return nil
}

// Output reads up to max bytes of a process's output from offset after, waiting up to wait for one.
func (c *Client) Output(ctx context.Context, pid int, after int64, max int, wait time.Duration) (sandbox.OutputChunk, error) {
	max = min(max, protocol.MaxOutputChunk)
	ctx, cancel := longPoll(ctx, wait)
	defer cancel()
	q := url.Values{"pid": {strconv.Itoa(pid)}, "after": {strconv.FormatInt(after, 10)},
		"max": {strconv.Itoa(max)}, "waitMs": {strconv.FormatInt(wait.Milliseconds(), 10)}}
	var out sandbox.OutputChunk
	err := c.call(ctx, http.MethodGet, protocol.PathProcessOutput, q, protocol.OutputMediaType, nil,
		int64(protocol.MaxOutputHeadBytes+max), func(a *agenthttp.Answer) error {
			raw, err := readAll(a)
			if err != nil {
				return fmt.Errorf("agent %s: %w", protocol.PathProcessOutput, err)
			}
			if out, err = decodeOutput(raw, after, max); err != nil {
				return fmt.Errorf("agent %s: %w", protocol.PathProcessOutput, err)
			}
			return nil
		})
	return out, err
}

// decodeOutput reads an answer to PathProcessOutput for a read from after of up to max bytes.
func decodeOutput(raw []byte, after int64, max int) (sandbox.OutputChunk, error) {
	nl := bytes.IndexByte(raw, '\n')
	if nl < 0 || nl > protocol.MaxOutputHeadBytes {
		return sandbox.OutputChunk{}, badAnswer("no head line")
	}
	dec := json.NewDecoder(bytes.NewReader(raw[:nl]))
	dec.DisallowUnknownFields()
	var h protocol.OutputHead
	if err := dec.Decode(&h); err != nil {
		return sandbox.OutputChunk{}, badAnswer("head: %v", err)
	}
	data := raw[nl+1:]
	if h.Length != len(data) || h.Length > max || h.Start < after || h.Oldest < 0 || h.Oldest > h.Start ||
		h.Start+int64(h.Length) > h.End || (h.Start > after && h.Start != h.Oldest) || (h.Done && h.Start+int64(h.Length) != h.End) {
		return sandbox.OutputChunk{}, badAnswer("head %+v for %d bytes from %d", h, len(data), after)
	}
	return sandbox.OutputChunk{Start: h.Start, Data: data, End: h.End, Oldest: h.Oldest, Done: h.Done}, nil
}

// Stdin writes data to a process's stdin, and closes it after when closeStdin.
func (c *Client) Stdin(ctx context.Context, pid int, data []byte, closeStdin bool) error {
	if len(data) > protocol.MaxStdinBytes {
		return fmt.Errorf("stdin of %d bytes past %d: %w", len(data), protocol.MaxStdinBytes, sandbox.ErrInvalidRequest)
	}
	q := url.Values{"pid": {strconv.Itoa(pid)}}
	if closeStdin {
		q.Set("close", "1")
	}
	return c.call(ctx, http.MethodPost, protocol.PathProcessStdin, q, "", data, agenthttp.MaxErrorBytes, nil)
}

// Signal sends a signal (one of protocol.Signals) to a process's group.
func (c *Client) Signal(ctx context.Context, pid int, signal string) error {
	body, _ := json.Marshal(protocol.ProcessSignal{PID: pid, Signal: signal})
	return c.call(ctx, http.MethodPost, protocol.PathProcessSignal, nil, "", body, agenthttp.MaxErrorBytes, nil)
}
