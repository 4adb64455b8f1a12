package agentclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
)

var _ sandbox.TerminalStreamer = DataPlane{}

// AttachTerminal opens the terminal stream of pty process pid from offset after, on a socket of its
// own (protocol.PathProcessTerminal); the agent says it is there every beat. The handshake is bounded
// by ctx (or the default call timeout); the stream, once open, by its two ends and the agent's beats.
//
// Errors: ErrUnsupportedCapability (an agent without the route, or a process without a terminal: the
// calls of stdin and output are the way), ErrNotFound, ErrInvalidRequest (an offset past the end),
// ErrProviderUnavailable, ErrProviderProtocol.
func (c *Client) AttachTerminal(ctx context.Context, pid int, after int64, beat time.Duration) (*TerminalStream, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	beat = min(max(beat, protocol.MinTerminalBeat), protocol.MaxTerminalBeat)
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("agent terminal: %v: %w", err, sandbox.ErrProviderUnavailable)
	}
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	q := url.Values{"pid": {strconv.Itoa(pid)}, "after": {strconv.FormatInt(after, 10)}, "beatMs": {strconv.FormatInt(beat.Milliseconds(), 10)}}
	br, err := upgrade(conn, "terminal", protocol.PathProcessTerminal+"?"+q.Encode(), protocol.UpgradeTerminal, deadline,
		func(code, msg string) error {
			if code == protocol.CodeNotTerminal {
				return fmt.Errorf("agent terminal: %s: %w", msg, sandbox.ErrUnsupportedCapability)
			}
			return nil
		})
	if errors.Is(err, errNoRoute) {
		err = fmt.Errorf("agent terminal: the sandbox's agent has no terminal stream (an agent of an earlier build): %w", sandbox.ErrUnsupportedCapability)
	}
	if !stop() && err == nil {
		err = fmt.Errorf("agent terminal: %v: %w", ctx.Err(), sandbox.ErrProviderUnavailable)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return NewTerminalStream(conn, br, after, beat), nil
}

// TerminalStream is the daemon's end of a terminal stream. It trusts nothing the agent says: each
// frame is bounded before it is read, output must go forward from the offset asked for, and a stream
// silent for longer than a beat and its slack is taken for gone. It needs no deadlines of its
// connection (a pods/exec stream has none): a silence, or a write past its context, closes it.
type TerminalStream struct {
	conn    net.Conn
	fr      *protocol.FrameReader
	silence time.Duration
	dog     *time.Timer // closes conn after a silence
	quiet   atomic.Bool // it did
	next    int64       // the offset the next output may not start before
	ended   bool

	wmu sync.Mutex
}

// NewTerminalStream is the stream on conn, switched already, whose reads come through r: its output
// from offset after, a frame every beat at least.
func NewTerminalStream(conn net.Conn, r *bufio.Reader, after int64, beat time.Duration) *TerminalStream {
	s := &TerminalStream{conn: conn, fr: protocol.NewFrameReader(r), silence: beat + protocol.TerminalSlack, next: after}
	s.dog = time.AfterFunc(s.silence, func() {
		s.quiet.Store(true)
		conn.Close()
	})
	return s
}

// Recv returns the next output, refusal or end; after the end, io.EOF. Errors: ErrProviderUnavailable
// (the stream broke or went silent), ErrProviderProtocol (a malformed frame, or output that goes back).
func (s *TerminalStream) Recv() (sandbox.TerminalEvent, error) {
	if s.ended {
		return sandbox.TerminalEvent{}, io.EOF
	}
	for {
		f, err := s.fr.Read()
		if s.quiet.Load() {
			return sandbox.TerminalEvent{}, fmt.Errorf("agent terminal: no frame for %v: %w", s.silence, sandbox.ErrProviderUnavailable)
		}
		if errors.Is(err, protocol.ErrTerminalFrame) {
			return sandbox.TerminalEvent{}, fmt.Errorf("agent terminal: %v: %w", err, sandbox.ErrProviderProtocol)
		}
		if err != nil {
			return sandbox.TerminalEvent{}, fmt.Errorf("agent terminal: %v: %w", err, sandbox.ErrProviderUnavailable)
		}
		s.dog.Reset(s.silence)
		switch f.Type {
		case protocol.FrameBeat:
			continue
		case protocol.FrameOutput:
			start, data := protocol.DecodeOutput(f.Payload)
			if start < s.next {
				return sandbox.TerminalEvent{}, fmt.Errorf("agent terminal: output from %d, before %d: %w", start, s.next, sandbox.ErrProviderProtocol)
			}
			s.next = start + int64(len(data))
			out := sandbox.OutputChunk{Start: start, Data: append([]byte(nil), data...), End: s.next, Oldest: start}
			return sandbox.TerminalEvent{Output: out}, nil
		case protocol.FrameRefused:
			return sandbox.TerminalEvent{Refused: string(f.Payload)}, nil
		case protocol.FrameEnd:
			e, _ := protocol.DecodeEnd(f.Payload) // checked by the reader
			if e.Offset != s.next {
				return sandbox.TerminalEvent{}, fmt.Errorf("agent terminal: end at %d, output to %d: %w", e.Offset, s.next, sandbox.ErrProviderProtocol)
			}
			s.ended = true
			s.dog.Stop()
			return sandbox.TerminalEvent{End: &sandbox.TerminalEnd{Reason: e.Reason, ExitCode: e.ExitCode, Offset: e.Offset,
				Message: e.Message}}, nil
		}
		return sandbox.TerminalEvent{}, fmt.Errorf("agent terminal: frame %q is the client's to send: %w", f.Type, sandbox.ErrProviderProtocol)
	}
}

// send writes frames within ctx's deadline (or the default call timeout); one past it closes the
// stream.
func (s *TerminalStream) send(ctx context.Context, frames []byte) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	stop := context.AfterFunc(ctx, func() { s.conn.Close() })
	_, err := s.conn.Write(frames)
	stop()
	if err != nil {
		return fmt.Errorf("agent terminal: %v: %w", err, sandbox.ErrProviderUnavailable)
	}
	return nil
}

// Stdin sends data to the terminal, in frames of at most protocol.MaxTerminalStdin.
func (s *TerminalStream) Stdin(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	b := make([]byte, 0, len(data)+(len(data)/protocol.MaxTerminalStdin+1)*protocol.TerminalHeadBytes)
	for len(data) > 0 {
		n := min(len(data), protocol.MaxTerminalStdin)
		b = protocol.AppendFrame(b, protocol.FrameStdin, data[:n])
		data = data[n:]
	}
	return s.send(ctx, b)
}

// Resize sends a resize to size, which the caller checked (sandbox.TerminalSize.Validate).
func (s *TerminalStream) Resize(ctx context.Context, size sandbox.TerminalSize) error {
	if err := size.Validate(); err != nil {
		return err
	}
	return s.send(ctx, protocol.ResizeFrame(size.Rows, size.Cols))
}

// Signal sends a signal of sandbox.ProcessSignals to the process's group.
func (s *TerminalStream) Signal(ctx context.Context, signal string) error {
	if len(signal) == 0 || len(signal) > protocol.MaxTerminalSignal {
		return fmt.Errorf("signal %.16q: %w", signal, sandbox.ErrInvalidRequest)
	}
	return s.send(ctx, protocol.AppendFrame(nil, protocol.FrameSignal, []byte(signal)))
}

// Close closes the stream's connection.
func (s *TerminalStream) Close() error {
	s.dog.Stop()
	return s.conn.Close()
}

// AttachTerminal opens a terminal stream to a process of the sandbox, bounded by CallTimeout.
func (d DataPlane) AttachTerminal(ctx context.Context, ref sandbox.Ref, pid int, after int64, beat time.Duration) (sandbox.TerminalStream, error) {
	var st *TerminalStream
	err := d.withAgent(ctx, ref, "attach terminal", 0, func(ctx context.Context, c *Client) (err error) {
		st, err = c.AttachTerminal(ctx, pid, after, beat)
		return err
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}
