package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandbox"
)

// The processes group of api/extensions.yaml: background processes whose output the sandbox keeps,
// read as a Server-Sent Events stream that resumes by byte offset.

// processRoutes are the group's operations.
func (s *Server) processRoutes() []route {
	const p = "/v1/sandboxes/{sandboxId}/processes"
	return []route{
		{http.MethodPost, p, s.startProcess},
		{http.MethodGet, p, s.listProcesses},
		{http.MethodGet, p + "/{pid}", s.getProcess},
		{http.MethodPost, p + "/{pid}/wait", s.waitProcess},
		{http.MethodPost, p + "/{pid}/stdin", s.writeProcessStdin},
		{http.MethodPost, p + "/{pid}/signal", s.signalProcess},
		{http.MethodGet, p + "/{pid}/output", s.streamProcessOutput},
	}
}

type processStartRequest struct {
	ExpectedGeneration sandbox.Generation    `json:"expectedGeneration"`
	Argv               []string              `json:"argv"`
	Cwd                string                `json:"cwd,omitempty"`
	Env                map[string]string     `json:"env,omitempty"`
	StdinBase64        string                `json:"stdinBase64,omitempty"`
	CloseStdin         bool                  `json:"closeStdin,omitempty"`
	Tag                string                `json:"tag,omitempty"`
	PTY                *sandbox.TerminalSize `json:"pty,omitempty"`
}

// decodeBase64 decodes standard, padded base64 without line breaks, as the contract's file write does.
func decodeBase64(field, s string) ([]byte, error) {
	if strings.ContainsAny(s, "\r\n") {
		return nil, fmt.Errorf("%s is not standard base64: it has a line break: %w", field, sandbox.ErrInvalidRequest)
	}
	data, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%s is not standard base64: %v: %w", field, err, sandbox.ErrInvalidRequest)
	}
	return data, nil
}

// processBody decodes the request body of an operation on one process into v, and returns its pid.
func processBody(r *http.Request, body []byte, v any) (int, error) {
	if err := decodeStrict(body, v); err != nil {
		return 0, err
	}
	return pidParam(r)
}

func pidParam(r *http.Request) (int, error) {
	pid, err := strconv.Atoi(r.PathValue("pid"))
	if err != nil || pid < 1 {
		return 0, fmt.Errorf("pid %.32q is not an integer >= 1: %w", r.PathValue("pid"), sandbox.ErrInvalidRequest)
	}
	return pid, nil
}

// startProcess: POST /v1/sandboxes/{sandboxId}/processes.
func (s *Server) startProcess(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req processStartRequest
	if err := decodeStrict(body, &req); err != nil {
		return err
	}
	stdin, err := decodeBase64("stdinBase64", req.StdinBase64)
	if err != nil {
		return err
	}
	p, err := s.rt.StartProcess(r.Context(), sandboxID(r), req.ExpectedGeneration, sandbox.ProcessSpec{
		Argv: req.Argv, Cwd: req.Cwd, Env: req.Env, Stdin: stdin, CloseStdin: req.CloseStdin, Tag: req.Tag, PTY: req.PTY})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, p)
	return nil
}

// listProcesses: GET /v1/sandboxes/{sandboxId}/processes?expectedGeneration=.
func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request, _ []byte) error {
	gen, err := expectedGeneration(r)
	if err != nil {
		return err
	}
	list, err := s.rt.ListProcesses(r.Context(), sandboxID(r), gen)
	if err != nil {
		return err
	}
	if list == nil {
		list = []sandbox.Process{}
	}
	writeJSON(w, http.StatusOK, struct {
		Processes []sandbox.Process `json:"processes"`
	}{list})
	return nil
}

// getProcess: GET /v1/sandboxes/{sandboxId}/processes/{pid}?expectedGeneration=.
func (s *Server) getProcess(w http.ResponseWriter, r *http.Request, _ []byte) error {
	gen, err := expectedGeneration(r)
	if err != nil {
		return err
	}
	pid, err := pidParam(r)
	if err != nil {
		return err
	}
	return s.answerWait(w, r, gen, pid, 0)
}

// answerWait answers the process pid once it has ended or timeout has passed.
func (s *Server) answerWait(w http.ResponseWriter, r *http.Request, gen sandbox.Generation, pid int, timeout time.Duration) error {
	p, err := s.rt.WaitProcess(r.Context(), sandboxID(r), gen, pid, timeout)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// waitProcess: POST /v1/sandboxes/{sandboxId}/processes/{pid}/wait.
func (s *Server) waitProcess(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req struct {
		ExpectedGeneration sandbox.Generation `json:"expectedGeneration"`
		TimeoutMs          int64              `json:"timeoutMs"`
	}
	pid, err := processBody(r, body, &req)
	if err != nil {
		return err
	}
	if req.TimeoutMs < 0 || req.TimeoutMs > sandbox.MaxProcessWait.Milliseconds() {
		return fmt.Errorf("timeoutMs %d out of 0..%d: %w", req.TimeoutMs, sandbox.MaxProcessWait.Milliseconds(), sandbox.ErrInvalidRequest)
	}
	return s.answerWait(w, r, req.ExpectedGeneration, pid, time.Duration(req.TimeoutMs)*time.Millisecond)
}

// writeProcessStdin: POST /v1/sandboxes/{sandboxId}/processes/{pid}/stdin.
func (s *Server) writeProcessStdin(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req struct {
		ExpectedGeneration sandbox.Generation `json:"expectedGeneration"`
		DataBase64         string             `json:"dataBase64"`
		Close              bool               `json:"close"`
	}
	pid, err := processBody(r, body, &req)
	if err != nil {
		return err
	}
	data, err := decodeBase64("dataBase64", req.DataBase64)
	if err != nil {
		return err
	}
	if err := s.rt.WriteStdin(r.Context(), sandboxID(r), req.ExpectedGeneration, pid, data, req.Close); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"written": len(data), "closed": req.Close})
	return nil
}

// signalProcess: POST /v1/sandboxes/{sandboxId}/processes/{pid}/signal.
func (s *Server) signalProcess(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req struct {
		ExpectedGeneration sandbox.Generation `json:"expectedGeneration"`
		Signal             string             `json:"signal"`
	}
	pid, err := processBody(r, body, &req)
	if err != nil {
		return err
	}
	if err := s.rt.SignalProcess(r.Context(), sandboxID(r), req.ExpectedGeneration, pid, req.Signal); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"signal": req.Signal})
	return nil
}

// outputPiece is how much output one event of the stream carries at most: a stream holds one piece
// (and its base64) while its write waits, so that many streams whose clients lag hold little.
const outputPiece = 64 << 10

// pollSlack is how much longer than its wait a poll of the sandbox's output may take before the
// stream ends with agent_unavailable.
const pollSlack = 3 * time.Second

// The reasons a process output stream ends (ProcessEndEvent.reason).
const (
	endExited         = "exited"
	endPaused         = "paused"
	endTerminated     = "terminated"
	endRecreated      = "recreated"
	endAgent          = "agent_unavailable"
	endDaemonStopping = "daemon_stopping"
	endError          = "error"
)

type processEndEvent struct {
	Reason   string `json:"reason"`
	Offset   int64  `json:"offset"`
	ExitCode *int   `json:"exitCode,omitempty"`
	Message  string `json:"message,omitempty"`
}

// streamProcessOutput: GET /v1/sandboxes/{sandboxId}/processes/{pid}/output, Server-Sent Events. Errors
// before the first byte are ErrorResponses; after it the stream always ends with an end event, unless
// the client stops reading (it is dropped after the write timeout, and resumes by offset). The stream
// polls the sandbox for output, at most a heartbeat interval at a time, and is woken by the runtime's
// events, so that a terminate or recreate ends it at once; a pause holds it (waitPaused), its heartbeats
// saying so, until the resume, after which it goes on from where it was.
func (s *Server) streamProcessOutput(w http.ResponseWriter, r *http.Request, _ []byte) error {
	gen, err := expectedGeneration(r)
	if err != nil {
		return err
	}
	pid, err := pidParam(r)
	if err != nil {
		return err
	}
	after, err := queryInt(r, "after", 0)
	if err != nil {
		return err
	}
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil {
			return fmt.Errorf("Last-Event-ID %.32q is not an offset: %w", v, sandbox.ErrInvalidRequest)
		}
	}
	if after < 0 {
		return fmt.Errorf("offset %d is negative: %w", after, sandbox.ErrInvalidRequest)
	}
	id, ctx := sandboxID(r), r.Context()
	wake, stop := s.rt.Watch()
	defer stop()
	chunk, err := s.rt.ReadOutput(ctx, id, gen, pid, after, outputPiece, 0)
	if err != nil {
		return err
	}

	sendSSE := s.startSSE(w)
	send := func(b []byte) bool {
		return sendSSE(func() bool {
			_, err := w.Write(b)
			return err == nil
		})
	}
	event := func(name string, id int64, v any) bool {
		data, _ := json.Marshal(v)
		head := "event: " + name + "\n"
		if id >= 0 {
			head += "id: " + strconv.FormatInt(id, 10) + "\n"
		}
		return send(append(append([]byte(head+"data: "), data...), "\n\n"...))
	}
	end := func(e processEndEvent) error {
		e.Offset = after
		event("end", -1, e)
		return nil
	}
	if !send([]byte(": stream\n\n")) {
		return nil
	}
	for {
		if chunk.Start > after {
			if !event("dropped", chunk.Start, map[string]int64{"from": after, "to": chunk.Start}) {
				return nil
			}
			after = chunk.Start
		}
		if len(chunk.Data) > 0 {
			next := chunk.Start + int64(len(chunk.Data))
			if !send(outputEvent(chunk.Start, chunk.Data)) {
				return nil
			}
			after = next
		}
		var woken bool
		if chunk.Done {
			p, werr := s.rt.WaitProcess(ctx, id, gen, pid, 0)
			if werr == nil {
				return end(processEndEvent{Reason: endExited, ExitCode: p.ExitCode})
			}
			err = werr
		} else {
			select {
			case <-s.done:
				return end(processEndEvent{Reason: endDaemonStopping})
			default:
			}
			chunk, woken, err = s.pollOutput(ctx, wake, id, gen, pid, after)
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			switch e := s.endOf(ctx, id, gen, err); {
			case e.Reason == endPaused:
				e, ok := s.waitPaused(ctx, wake, id, gen, s.heartbeat, func() bool { return send(heartbeatEvent(statePaused, after)) })
				switch {
				case !ok:
					return nil
				case e.Reason != "":
					return end(e)
				case !send(heartbeatEvent(stateRunning, after)):
					return nil
				}
			case e.Reason == "" && woken: // an event of another kind: poll again
			case e.Reason == "":
				return end(processEndEvent{Reason: endAgent, Message: err.Error()})
			default:
				return end(e)
			}
			chunk = sandbox.OutputChunk{Start: after}
		case len(chunk.Data) == 0 && !chunk.Done && chunk.Start == after:
			if !send([]byte(": heartbeat\n\n")) {
				return nil
			}
		}
	}
}

// outputEvent is the SSE message of an output event: its ProcessOutputEvent written as json.Marshal
// would, the data base64-encoded straight into it (the standard alphabet needs no JSON escaping).
func outputEvent(offset int64, data []byte) []byte {
	off := strconv.FormatInt(offset, 10)
	id := strconv.FormatInt(offset+int64(len(data)), 10)
	n := base64.StdEncoding.EncodedLen(len(data))
	const head, mid, tail = "event: output\nid: ", "\ndata: {\"offset\":", ",\"dataBase64\":\""
	b := make([]byte, 0, len(head)+len(id)+len(mid)+len(off)+len(tail)+n+4)
	b = append(append(append(append(append(b, head...), id...), mid...), off...), tail...)
	b = b[:len(b)+n]
	base64.StdEncoding.Encode(b[len(b)-n:], data)
	return append(b, "\"}\n\n"...)
}

// pollOutput reads the output after offset, waiting up to the heartbeat interval for it; the wait
// is cut short (woken true, and the poll's error) by an event of the runtime or the server's close.
func (s *Server) pollOutput(ctx context.Context, wake <-chan struct{}, id sandbox.ID, gen sandbox.Generation, pid int, after int64) (sandbox.OutputChunk, bool, error) {
	pctx, cancel := context.WithTimeout(ctx, s.heartbeat+pollSlack)
	defer cancel()
	stopped := make(chan struct{})
	woke := make(chan bool, 1)
	go func() {
		select {
		case <-wake:
			woke <- true
			cancel()
		case <-s.done:
			woke <- true
			cancel()
		case <-stopped:
			woke <- false
		}
	}()
	chunk, err := s.rt.ReadOutput(pctx, id, gen, pid, after, outputPiece, s.heartbeat)
	close(stopped)
	return chunk, <-woke, err
}

// endOf is the end event of a stream whose poll failed with err: what became of the sandbox, or of the
// server. An empty reason: the sandbox is as it was, and err is the poll's own; endPaused: the sandbox
// is pausing, paused or resuming, and the stream waits (waitPaused).
func (s *Server) endOf(ctx context.Context, id sandbox.ID, gen sandbox.Generation, err error) processEndEvent {
	select {
	case <-s.done:
		return processEndEvent{Reason: endDaemonStopping}
	default:
	}
	sb, gerr := s.rt.Get(ctx, id)
	switch {
	case errors.Is(gerr, sandbox.ErrNotFound):
		return processEndEvent{Reason: endTerminated}
	case gerr != nil:
		return processEndEvent{Reason: endError, Message: gerr.Error()}
	case sb.Generation != gen:
		return processEndEvent{Reason: endRecreated}
	case pausedState(sb.State):
		return processEndEvent{Reason: endPaused} // not an end: the stream waits the pause out
	case sb.State == sandbox.StateTerminating || sb.State == sandbox.StateTerminated || sb.State == sandbox.StateFailed:
		return processEndEvent{Reason: endTerminated}
	case sb.State != sandbox.StateReady:
		return processEndEvent{Reason: endError, Message: fmt.Sprintf("the sandbox is %s", sb.State)}
	case errors.Is(err, sandbox.ErrNotFound):
		return processEndEvent{Reason: endError, Message: err.Error()} // the process was forgotten
	}
	return processEndEvent{}
}
