package kubernetes_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/internal/testenv/processtest"
	"github.com/sandboxd/sandbox/provider/kubernetes"
)

// BenchmarkTerminalEchoPath times the parts of BenchmarkTerminalEcho's path, and the paths beside
// it, each on its own beside the same floor (a local pty's echo): one byte to a program that echoes it,
// until the echo comes back.
//
//   - provider: the process on the agent's pty, as the terminal attach drives it but without the
//     daemon's HTTP server and WebSocket: the byte by the provider's WriteStdin, the echo by its
//     ReadOutput, a long poll always waiting, as the attach's.
//   - stream: the same over the provider's terminal stream (AttachTerminal), as the attach drives it
//     where the agent has one: the key in and its echo out on one pods/exec stream of their own.
//   - call: one call to the agent that waits for nothing (a read of a silent process's output), for
//     its round trip through pods/exec, the relay and the agent's HTTP; no floor.
//   - podsexec: `cat` in the sandbox container on a pods/exec stream of its own, through the API
//     server, the kubelet and the container runtime, opened as the provider opens its streams to the
//     agent: the provider's transport with no relay, no agent and no HTTP.
//   - podsexec-tty: the same on a terminal of the runtime's (`kubectl exec -it`), the echo program
//     on it.
//   - kubelet: podsexec opened at the kubelet itself (SPDY, as the API server does), without the API
//     server.
//   - portforward: `nc -l -e` in the sandbox reached through pods/portforward (as kubectl
//     port-forward), which the container runtime dials in the Pod's network namespace: no exec'd
//     process between.
func BenchmarkTerminalEchoPath(b *testing.B) {
	ns := namespace(b)
	p := newProviderIn(b, config(b, ns))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	ref := sandbox.Ref{ID: sandbox.NewID(), Generation: 1}
	if _, err := p.Allocate(ctx, ref, sandbox.Spec{ClientRequestID: "bench-echo-path"}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Release(context.Background(), ref) })
	waitObserved(b, p, ref, sandbox.ObservedReady)
	pods, err := clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 1 {
		b.Fatalf("the sandbox's Pod: %d Pods, %v", len(pods.Items), err)
	}
	pod := &pods.Items[0]

	b.Run("provider", func(b *testing.B) {
		w, r := processStream(b, ctx, p, ref)
		processtest.BenchmarkStreamEcho(b, w, r)
	})
	b.Run("stream", func(b *testing.B) {
		w, r := terminalStream(b, ctx, p, ref)
		processtest.BenchmarkStreamEcho(b, w, r)
	})
	b.Run("call", func(b *testing.B) {
		proc, err := p.StartProcess(ctx, ref, sandbox.ProcessSpec{Argv: []string{"sleep", "3600"}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { p.SignalProcess(context.Background(), ref, proc.PID, "KILL") })
		ds := make([]time.Duration, 0, b.N)
		for range b.N {
			start := time.Now()
			if _, err := p.ReadOutput(ctx, ref, proc.PID, 0, 1, 0); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		report(b, ds)
	})
	b.Run("podsexec", func(b *testing.B) {
		w, r := execStream(b, ctx, podExec(b, pod, processtest.StreamEchoArgv, false), false)
		processtest.BenchmarkStreamEcho(b, w, r)
	})
	b.Run("podsexec-tty", func(b *testing.B) {
		w, r := execStream(b, ctx, podExec(b, pod, processtest.EchoArgv, true), true)
		processtest.BenchmarkStreamEcho(b, w, r)
	})
	b.Run("kubelet", func(b *testing.B) {
		node, err := clientset.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		cfg := rest.CopyConfig(restCfg)
		cfg.Host = fmt.Sprintf("https://%s:%d", pod.Status.HostIP, node.Status.DaemonEndpoints.KubeletEndpoint.Port)
		q := url.Values{"input": {"1"}, "output": {"1"}, "command": processtest.StreamEchoArgv}
		u, err := url.Parse(cfg.Host + "/exec/" + ns + "/" + pod.Name + "/sandbox?" + q.Encode())
		if err != nil {
			b.Fatal(err)
		}
		ex, err := remotecommand.NewSPDYExecutor(cfg, "POST", u)
		if err != nil {
			b.Fatal(err)
		}
		w, r := execStream(b, ctx, ex, false)
		processtest.BenchmarkStreamEcho(b, w, r)
	})
	b.Run("portforward", func(b *testing.B) {
		if _, err := p.StartProcess(ctx, ref, sandbox.ProcessSpec{Argv: append([]string{"nc", "-l", "-p", "7000", "-e"}, processtest.StreamEchoArgv...)}); err != nil {
			b.Fatal(err)
		}
		s := portForward(b, pod, 7000)
		processtest.BenchmarkStreamEcho(b, s, s)
	})
}

// podExec is an executor of argv in the sandbox container of pod over pods/exec, made as the
// provider makes its streams to the agent: WebSocket, and SPDY when the API server does not upgrade.
func podExec(b *testing.B, pod *corev1.Pod, argv []string, tty bool) remotecommand.Executor {
	req := clientset.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Container: "sandbox", Command: argv, Stdin: true, Stdout: true, TTY: tty,
	}, scheme.ParameterCodec)
	spdy, err := remotecommand.NewSPDYExecutor(restCfg, "POST", req.URL())
	if err != nil {
		b.Fatal(err)
	}
	ws, err := remotecommand.NewWebSocketExecutor(restCfg, "GET", req.URL().String())
	if err != nil {
		b.Fatal(err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		b.Fatal(err)
	}
	return ex
}

// portForward opens a pods/portforward stream to port of pod, as kubectl port-forward does (SPDY
// tunnelled in WebSocket, or SPDY), retrying while nothing listens there yet.
func portForward(b *testing.B, pod *corev1.Pod, port int) httpstream.Stream {
	req := clientset.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward")
	tr, up, err := spdy.RoundTripperFor(restCfg)
	if err != nil {
		b.Fatal(err)
	}
	ws, err := portforward.NewSPDYOverWebsocketDialer(req.URL(), restCfg)
	if err != nil {
		b.Fatal(err)
	}
	dialer := portforward.NewFallbackDialer(ws, spdy.NewDialer(up, &http.Client{Transport: tr}, "POST", req.URL()), func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	conn, _, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	for id := 0; ; id++ {
		h := http.Header{}
		h.Set(corev1.StreamType, corev1.StreamTypeError)
		h.Set(corev1.PortHeader, strconv.Itoa(port))
		h.Set(corev1.PortForwardRequestIDHeader, strconv.Itoa(id))
		errs, err := conn.CreateStream(h)
		if err != nil {
			b.Fatal(err)
		}
		errs.Close()
		h.Set(corev1.StreamType, corev1.StreamTypeData)
		data, err := conn.CreateStream(h)
		if err != nil {
			b.Fatal(err)
		}
		// The error stream ends empty once the connection in the Pod ends; a refused one says so at once.
		failed := make(chan string, 1)
		go func() {
			msg, _ := io.ReadAll(errs)
			failed <- string(msg)
		}()
		select {
		case msg := <-failed:
			if msg == "" || id == 100 {
				b.Fatalf("port-forward to %d: %q", port, msg)
			}
			data.Close()
			time.Sleep(100 * time.Millisecond)
			continue
		case <-time.After(time.Second):
		}
		return data
	}
}

// processStream starts the echo program on a pty of the sandbox's agent and returns its stdin, written
// by WriteStdin, and its output, read by a loop of ReadOutput long polls.
func processStream(b *testing.B, ctx context.Context, p *kubernetes.Provider, ref sandbox.Ref) (io.Writer, io.Reader) {
	proc, err := p.StartProcess(ctx, ref, sandbox.ProcessSpec{Argv: processtest.EchoArgv, PTY: &sandbox.TerminalSize{Rows: 24, Cols: 80}})
	if err != nil {
		b.Fatal(err)
	}
	pctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var after int64
		for {
			chunk, err := p.ReadOutput(pctx, ref, proc.PID, after, 64<<10, time.Second)
			if err == nil && len(chunk.Data) > 0 {
				_, err = pw.Write(chunk.Data)
			}
			if err == nil && chunk.Done {
				err = io.EOF
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			after = chunk.Start + int64(len(chunk.Data))
		}
	}()
	b.Cleanup(func() {
		p.SignalProcess(context.Background(), ref, proc.PID, "KILL")
		cancel()
		pr.Close()
		<-done
	})
	return stdinWriter{ctx: ctx, p: p, ref: ref, pid: proc.PID}, pr
}

// terminalStream starts EchoArgv on a pty of ref and opens its terminal stream: what is written to
// the writer goes in as keys, the reader reads the output.
func terminalStream(b *testing.B, ctx context.Context, p *kubernetes.Provider, ref sandbox.Ref) (io.Writer, io.Reader) {
	proc, err := p.StartProcess(ctx, ref, sandbox.ProcessSpec{Argv: processtest.EchoArgv, PTY: &sandbox.TerminalSize{Rows: 24, Cols: 80}})
	if err != nil {
		b.Fatal(err)
	}
	st, err := p.AttachTerminal(ctx, ref, proc.PID, 0, 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := st.Recv()
			if err == nil && ev.End != nil {
				err = io.EOF
			}
			if err == nil {
				_, err = pw.Write(ev.Output.Data)
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
		}
	}()
	b.Cleanup(func() {
		p.SignalProcess(context.Background(), ref, proc.PID, "KILL")
		st.Close()
		pr.Close()
		<-done
	})
	return streamWriter{ctx: ctx, st: st}, pr
}

// streamWriter writes to a terminal stream's keys.
type streamWriter struct {
	ctx context.Context
	st  sandbox.TerminalStream
}

func (w streamWriter) Write(b []byte) (int, error) {
	if err := w.st.Stdin(w.ctx, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

type stdinWriter struct {
	ctx context.Context
	p   *kubernetes.Provider
	ref sandbox.Ref
	pid int
}

func (w stdinWriter) Write(b []byte) (int, error) {
	if err := w.p.WriteStdin(w.ctx, w.ref, w.pid, b, false); err != nil {
		return 0, err
	}
	return len(b), nil
}

// execStream runs ex's command, on a terminal when tty, with its stdin and stdout joined to the pipes it
// returns, until the benchmark ends.
func execStream(b *testing.B, ctx context.Context, ex remotecommand.Executor, tty bool) (io.Writer, io.Reader) {
	sctx, cancel := context.WithCancel(ctx)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := ex.StreamWithContext(sctx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Tty: tty})
		outW.CloseWithError(fmt.Errorf("exec stream ended: %v", err))
	}()
	b.Cleanup(func() {
		inW.Close()
		cancel()
		outR.Close()
		<-done
	})
	return inW, outR
}
