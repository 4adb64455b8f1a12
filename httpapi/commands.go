package httpapi

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

// command maps the wire request to the domain command. A left-out timeoutSeconds or maxOutputBytes is
// zero, which the runtime fills with the default (sandbox.Command.Normalize, with the other bounds of a
// command). Errors: ErrInvalidRequest for a value given out of the contract's range: the schema refuses
// it first; checked again because a given zero must not become the default, nor a huge number of
// seconds overflow a time.Duration.
func command(req api.CommandRequest) (sandbox.Command, error) {
	cmd := sandbox.Command{Argv: req.Argv, Cwd: req.Cwd, Env: req.Env}
	if t := req.TimeoutSeconds; t != nil {
		if math.IsNaN(*t) || *t <= 0 || *t > sandbox.MaxCommandTimeout.Seconds() {
			return sandbox.Command{}, fmt.Errorf("timeoutSeconds %v out of (0, %v]: %w",
				*t, sandbox.MaxCommandTimeout.Seconds(), sandbox.ErrInvalidRequest)
		}
		// A positive timeout below a nanosecond still means "time out at once", never "the default".
		cmd.Timeout = max(time.Duration(*t*float64(time.Second)), time.Nanosecond)
	}
	if m := req.MaxOutputBytes; m != nil {
		if *m < 1 || *m > sandbox.MaxMaxOutputBytes {
			return sandbox.Command{}, fmt.Errorf("maxOutputBytes %d out of [1, %d]: %w",
				*m, sandbox.MaxMaxOutputBytes, sandbox.ErrInvalidRequest)
		}
		cmd.MaxOutputBytes = *m
	}
	return cmd, nil
}

// executeCommand: POST /v1/sandboxes/{sandboxId}/commands. It runs under the request's context: a client
// that goes away cancels the command.
func (s *Server) executeCommand(w http.ResponseWriter, r *http.Request, body []byte) error {
	var req api.CommandRequest
	if err := decodeStrict(body, &req); err != nil {
		return err
	}
	cmd, err := command(req)
	if err != nil {
		return err
	}
	res, err := s.rt.Exec(r.Context(), sandboxID(r), req.ExpectedGeneration, cmd)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}
