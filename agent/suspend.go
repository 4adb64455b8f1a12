package agent

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// suspend answers PathSuspend and hands the next socket's name to the serving loop (Main), which
// closes the server once the answer is out.
func (a *Agent) suspend(w http.ResponseWriter, r *http.Request) {
	var req protocol.SuspendRequest
	if err := decode(r, &req); err != nil {
		writeErr(w, err)
		return
	}
	if name := req.Socket; !strings.HasPrefix(name, "agent-") || len(name) > protocol.MaxSocketName || strings.ContainsAny(name, "/\x00") {
		writeErr(w, fmt.Errorf("socket name %q: %w", name, sandbox.ErrInvalidRequest))
		return
	}
	if a.suspended == nil {
		writeErr(w, fmt.Errorf("the agent serves an inherited socket, which it cannot bind again: %w", sandbox.ErrInvalidRequest))
		return
	}
	select {
	case a.suspended <- req.Socket:
	default:
		writeErr(w, fmt.Errorf("a suspend is under way: %w", sandbox.ErrInvalidState))
		return
	}
	w.WriteHeader(http.StatusNoContent)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// suspendServer closes srv, whose listener is at socket, once the suspend's answer has had time to go
// out, and waits for SIGUSR2 on wake, or for ctx to end (its error). It returns the path of the socket
// to bind next: next, beside socket. A SIGUSR2 before the suspend is forgotten.
func suspendServer(ctx context.Context, srv *http.Server, socket, next string, wake <-chan os.Signal) (string, error) {
	for len(wake) > 0 {
		<-wake
	}
	// Shutdown would wait for streams that never end; the suspend's own answer is flushed already.
	time.Sleep(20 * time.Millisecond)
	srv.Close() // the socket's file stays: gVisor's restore looks it up again
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-wake:
	}
	return filepath.Join(filepath.Dir(socket), next), nil
}
