package protocol_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/sandboxd/sandbox/agent/protocol"
)

// FuzzTerminalFrames feeds arbitrary bytes to the terminal stream's frame reader: it never reads a
// payload past its type's bound, and every frame it accepts is one the encoders make again byte for
// byte; anything else is ErrTerminalFrame or the reader's own end.
func FuzzTerminalFrames(f *testing.F) {
	for _, seed := range [][]byte{
		protocol.AppendFrame(nil, protocol.FrameStdin, []byte("ls\n")),
		protocol.ResizeFrame(24, 80),
		protocol.AppendFrame(nil, protocol.FrameSignal, []byte("INT")),
		protocol.OutputFrame(nil, 42, []byte("hello")),
		protocol.AppendFrame(nil, protocol.FrameBeat),
		protocol.RefusedFrame("process 7 has exited"),
		protocol.EndFrame(protocol.TerminalEnd{Reason: protocol.TerminalExited, Offset: 5}),
		{protocol.FrameOutput, 0xff, 0xff, 0xff, 0xff},
		{protocol.FrameResize, 0, 0, 0, 4, 0, 0, 0, 0},
		{'z', 0, 0, 0, 0},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr := protocol.NewFrameReader(bufio.NewReader(bytes.NewReader(b)))
		for {
			fm, err := fr.Read()
			if err != nil {
				if !errors.Is(err, protocol.ErrTerminalFrame) && err != io.EOF && err != io.ErrUnexpectedEOF {
					t.Fatalf("error %v is none of the reader's", err)
				}
				return
			}
			var again []byte
			switch fm.Type {
			case protocol.FrameResize:
				rows, cols := protocol.DecodeResize(fm.Payload)
				if rows < 1 || cols < 1 {
					t.Fatalf("resize to %dx%d accepted", rows, cols)
				}
				again = protocol.ResizeFrame(rows, cols)
			case protocol.FrameOutput:
				start, data := protocol.DecodeOutput(fm.Payload)
				if start < 0 || len(data) == 0 || len(data) > protocol.MaxTerminalOutput {
					t.Fatalf("output of %d bytes from %d accepted", len(data), start)
				}
				again = protocol.OutputFrame(nil, start, data)
			case protocol.FrameEnd:
				e, err := protocol.DecodeEnd(fm.Payload)
				if err != nil || e.Reason == "" {
					t.Fatalf("end %+v accepted: %v", e, err)
				}
				again = protocol.AppendFrame(nil, fm.Type, fm.Payload)
			case protocol.FrameStdin, protocol.FrameSignal, protocol.FrameBeat, protocol.FrameRefused:
				again = protocol.AppendFrame(nil, fm.Type, fm.Payload)
			default:
				t.Fatalf("frame of unknown type %q accepted", fm.Type)
			}
			if len(fm.Payload) > protocol.MaxTerminalOutput+8 || len(again) != protocol.TerminalHeadBytes+len(fm.Payload) {
				t.Fatalf("frame %q of %d bytes encodes in %d", fm.Type, len(fm.Payload), len(again))
			}
		}
	})
}
