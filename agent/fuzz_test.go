package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// FuzzServerRequests sends fuzzed exec and cancel bodies and deadline headers to the agent's handler.
// Every exec carries a deadline in the past, checked right before the fork, so nothing is ever run: what
// is under test is the decoding before it. Every answer is JSON: an Error with a known code, or 204.
func FuzzServerRequests(f *testing.F) {
	for _, seed := range []string{
		`{"id":"a","argv":["true"],"timeoutMs":1000,"maxOutputBytes":10}`,
		`{"argv":[],"timeoutMs":1,"maxOutputBytes":1}`,
		`{"argv":["x"],"timeoutMs":-1,"maxOutputBytes":1}`,
		`{"argv":["x"],"timeoutMs":1,"maxOutputBytes":99999999999}`,
		`{"argv":["x"],"env":{"A":"\u0000"},"cwd":"../..","timeoutMs":1,"maxOutputBytes":1,"extra":1}`,
		`{"id":"a"}`, `null`, `[`, ``,
	} {
		f.Add([]byte(seed), "1")
	}
	a := &Agent{runs: map[string]context.CancelFunc{}}
	h := a.Handler()
	past := strconv.FormatInt(time.Now().Add(-time.Hour).UnixNano(), 10)
	f.Fuzz(func(t *testing.T, body []byte, deadline string) {
		for _, path := range []string{protocol.PathExec, protocol.PathCancel} {
			r := httptest.NewRequest("POST", path, bytes.NewReader(body))
			r.Header.Set(protocol.HeaderDeadline, past)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			checkAgentAnswer(t, path, body, w)
		}
		// The deadline header alone: missing, malformed and past ones are refused with an Error.
		r := httptest.NewRequest("GET", protocol.PathFile, nil)
		r.Header.Set(protocol.HeaderDeadline, deadline)
		w := httptest.NewRecorder()
		if checkDeadline(w, r) {
			ns, err := strconv.ParseInt(deadline, 10, 64)
			if err != nil || time.Unix(0, ns).Before(time.Now().Add(-time.Second)) {
				t.Fatalf("deadline %q accepted", deadline)
			}
			return
		}
		checkAgentAnswer(t, "deadline", []byte(deadline), w)
	})
}

func checkAgentAnswer(t *testing.T, path string, body []byte, w *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code == http.StatusNoContent && path == protocol.PathCancel {
		return
	}
	var e protocol.Error
	dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Code == "" {
		t.Fatalf("%s %q: answer %d %q is not an Error", path, body, w.Code, w.Body.Bytes())
	}
	if e.Code != protocol.CodeDeadline && sandbox.ErrorForCode(sandbox.ErrorCode(e.Code)) == nil {
		t.Fatalf("%s %q: unknown code %q", path, body, e.Code)
	}
	if w.Code/100 == 2 {
		t.Fatalf("%s %q: error with status %d", path, body, w.Code)
	}
}
