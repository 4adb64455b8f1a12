package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
)

// execSlack is how much longer than a command's timeout the provider waits for its result: the agent
// needs time to kill the group and answer, and the answer crosses the API server and the kubelet.
const execSlack = 10 * time.Second

// cancelWait bounds how long a cancelled Exec waits for the agent's cancelled result.
const cancelWait = 5 * time.Second

// dialer returns the agent client's dial function for a Pod: each connection is one pods/exec stream
// running `sandboxd agent relay` in the sandbox container, its stdin and stdout joined to the agent's
// socket. The stream speaks WebSocket, and SPDY when the API server does not upgrade to WebSocket.
func (p *Provider) dialer(name string) func(ctx context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		req := p.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.cfg.Namespace).Name(name).
			SubResource("exec").VersionedParams(&corev1.PodExecOptions{
			Container: containerName,
			Command:   []string{agentBinary, "agent", "relay", "-socket", agentSocket},
			Stdin:     true,
			Stdout:    true,
			Stderr:    true,
		}, scheme.ParameterCodec)
		spdy, err := remotecommand.NewSPDYExecutor(p.rest, "POST", req.URL())
		if err != nil {
			return nil, fmt.Errorf("exec stream: %w", err)
		}
		ws, err := remotecommand.NewWebSocketExecutor(p.rest, "GET", req.URL().String())
		if err != nil {
			return nil, fmt.Errorf("exec stream: %w", err)
		}
		ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
		if err != nil {
			return nil, fmt.Errorf("exec stream: %w", err)
		}
		return newStreamConn(ex), nil
	}
}

// streamConn is a net.Conn over one exec stream: writes go to the remote stdin, reads come from the
// remote stdout. The stream runs until Close, or until the remote relay ends; the stream's failure
// (or the relay's stderr) is what the next Read returns.
type streamConn struct {
	inR    *io.PipeReader
	inW    *io.PipeWriter
	outR   *io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func newStreamConn(ex remotecommand.Executor) *streamConn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &streamConn{cancel: cancel, done: make(chan struct{})}
	c.inR, c.inW = io.Pipe()
	var outW *io.PipeWriter
	c.outR, outW = io.Pipe()
	go func() {
		defer close(c.done)
		var stderr limitedBuffer
		err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: c.inR, Stdout: outW, Stderr: &stderr})
		if err == nil && stderr.Len() > 0 {
			err = fmt.Errorf("relay: %s", bytes.TrimSpace(stderr.Bytes()))
		}
		if err != nil {
			outW.CloseWithError(fmt.Errorf("exec stream: %w", err))
		} else {
			outW.Close()
		}
		c.inR.CloseWithError(io.ErrClosedPipe)
	}()
	return c
}

func (c *streamConn) Read(b []byte) (int, error)  { return c.outR.Read(b) }
func (c *streamConn) Write(b []byte) (int, error) { return c.inW.Write(b) }

// Close ends the stream: the relay sees its stdin end and exits, which closes its connection to the
// agent (a request still running there is cancelled, as for any client that went away).
func (c *streamConn) Close() error {
	c.once.Do(func() {
		c.inW.Close()
		go io.Copy(io.Discard, c.outR) // whatever the relay still sends, until the stream ends
		select {
		case <-c.done:
		case <-time.After(2 * time.Second):
		}
		c.cancel()
		c.outR.Close()
	})
	return nil
}

type streamAddr struct{}

func (streamAddr) Network() string { return "pods-exec" }
func (streamAddr) String() string  { return "pods/exec" }

func (c *streamConn) LocalAddr() net.Addr  { return streamAddr{} }
func (c *streamConn) RemoteAddr() net.Addr { return streamAddr{} }

// Deadlines are not supported by the stream; the agent client bounds every call with its context,
// and closes the connection when the context ends.
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }

// limitedBuffer keeps the first 4 KiB written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 4096 - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *limitedBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

func (b *limitedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// usable returns the box of ref when its Pod exists and runs. Errors: ErrNotFound when there is no
// Pod or it is being deleted, ErrProviderUnavailable when it does not run.
func (p *Provider) usable(ctx context.Context, ref sandbox.Ref) (*box, error) {
	b := p.box(ref)
	ctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	pod, err := p.getPod(ctx, b.name)
	if err != nil {
		return nil, err
	}
	if pod == nil || pod.DeletionTimestamp != nil {
		return nil, fmt.Errorf("sandbox %s: no Pod, or one being deleted: %w", ref, sandbox.ErrNotFound)
	}
	if pod.Status.Phase != corev1.PodRunning {
		return nil, fmt.Errorf("sandbox %s: Pod %s is %s: %w", ref, pod.Name, pod.Status.Phase, sandbox.ErrProviderUnavailable)
	}
	return b, nil
}

// agents finds the agents of the provider's sandboxes for its DataPlane.
type agents struct{ p *Provider }

// Agent is the agent client of a sandbox whose Pod runs (see usable).
func (a agents) Agent(ctx context.Context, ref sandbox.Ref) (*agentclient.Client, error) {
	b, err := a.p.usable(ctx, ref)
	if err != nil {
		return nil, err
	}
	return b.client, nil
}
