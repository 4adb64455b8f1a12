package protocol

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandbox"
)

// The agent's terminal stream (protocol 2, framing TerminalFraming): a GET of PathProcessTerminal with
// "Connection: Upgrade" and "Upgrade: UpgradeTerminal" attaches to a pty process of the agent's table
// (ProcessStart.PTY). Once the agent has checked the process, it answers 101 Switching Protocols, and
// the socket carries frames both ways: the client's keys, resizes and signals in, the process's output
// out from offset after, read from its journal as a ReadOutput would (the journal stays the record of
// the output: a stream only tails it, so a client that reads slowly or not at all holds up nothing but
// its own stream), and at last one end frame, which says why the stream ends.
//
// Before the switch, a process the agent does not have is an Error with not_found, one without a
// terminal CodeNotTerminal (status 409), an offset past its output's end invalid_request; an agent
// without the route answers 404 with no error body, and its client goes on with the calls of
// PathProcessStdin and PathProcessOutput.
const (
	PathProcessTerminal = "/v1/process/terminal" // GET ?pid=&after=&beatMs=, upgraded
	// TerminalFraming is the version of the frames below; UpgradeTerminal names it, so that an agent
	// that frames otherwise refuses the switch instead of misreading the stream.
	TerminalFraming = 1
	UpgradeTerminal = "sandboxd-terminal-1"
)

// CodeNotTerminal says the process has no terminal: its output is read with PathProcessOutput.
const CodeNotTerminal = "not_terminal"

// A frame is a 5-byte head, its type and the length of its payload (big-endian uint32), then the
// payload. Each type bounds its payload's length; a frame of an unknown type, or past its bound, ends
// the stream (ErrTerminalFrame).
const (
	// From the client.
	FrameStdin  byte = 'i' // the bytes to write to the terminal, 1..MaxTerminalStdin
	FrameResize byte = 'r' // rows, cols: two big-endian uint16, each 1..65535
	FrameSignal byte = 's' // a signal's name of Signals, 1..MaxTerminalSignal bytes

	// From the agent.
	FrameOutput  byte = 'o' // the output's offset (big-endian int64), then 1..MaxTerminalOutput bytes of it
	FrameBeat    byte = 'h' // nothing happened for a beat; empty
	FrameRefused byte = 'e' // a frame the agent could not carry out (UTF-8, 1..MaxTerminalMessage); the stream goes on
	FrameEnd     byte = 'x' // TerminalEnd in JSON, at most MaxTerminalEndBytes; nothing follows
)

// Bounds of the terminal stream.
const (
	TerminalHeadBytes   = 5
	MaxTerminalStdin    = 64 << 10
	MaxTerminalOutput   = 64 << 10
	MaxTerminalSignal   = 8
	MaxTerminalMessage  = 512
	MaxTerminalEndBytes = 1024
	// MinTerminalBeat and MaxTerminalBeat bound beatMs: how often the agent says it is there when the
	// process says nothing.
	MinTerminalBeat = 50 * time.Millisecond
	MaxTerminalBeat = MaxWait
	// TerminalSlack is how much longer than a beat a client waits for a frame before it takes the
	// agent for gone.
	TerminalSlack = 3 * time.Second
	// TerminalWriteTimeout bounds each of the agent's writes to a stream: a client that reads nothing
	// for that long loses the stream (the output stays in the journal).
	TerminalWriteTimeout = MaxWait
)

// The reasons of an end frame.
const (
	TerminalExited        = "exited"         // the process exited and every byte of its output was sent; ExitCode
	TerminalAgentStopping = "agent_stopping" // the agent is going away (its sandbox is stopping)
	TerminalSuspended     = "suspended"      // the agent suspends its server (a checkpoint): attach again after the resume
	TerminalProtocol      = "protocol"       // the client sent a malformed frame
	TerminalError         = "error"          // the journal could not be read, or the process was forgotten
)

// TerminalEnd is the payload of an end frame. Offset is past the last byte of output the stream sent.
type TerminalEnd struct {
	Reason   string `json:"reason"`
	ExitCode *int   `json:"exitCode,omitempty"`
	Offset   int64  `json:"offset"`
	Message  string `json:"message,omitempty"`
}

// ErrTerminalFrame says a frame is malformed: of an unknown type, past its bound, or with a payload
// its type cannot have.
var ErrTerminalFrame = errors.New("malformed terminal frame")

// Frame is one frame of a terminal stream, as read; Payload is valid until the next read.
type Frame struct {
	Type    byte
	Payload []byte
}

// maxPayload is the bound of a frame type's payload, and whether the type is known.
func maxPayload(typ byte) (int, bool) {
	switch typ {
	case FrameStdin:
		return MaxTerminalStdin, true
	case FrameResize:
		return 4, true
	case FrameSignal:
		return MaxTerminalSignal, true
	case FrameOutput:
		return 8 + MaxTerminalOutput, true
	case FrameBeat:
		return 0, true
	case FrameRefused:
		return MaxTerminalMessage, true
	case FrameEnd:
		return MaxTerminalEndBytes, true
	}
	return 0, false
}

// FrameReader reads the frames of a terminal stream, each checked against its type's bound before
// its payload is read.
type FrameReader struct {
	r   *bufio.Reader
	buf []byte
}

// NewFrameReader reads frames from r.
func NewFrameReader(r *bufio.Reader) *FrameReader { return &FrameReader{r: r} }

// Read returns the next frame, which checkFrame accepts. Errors: those of the reader (io.EOF at a
// frame's border, io.ErrUnexpectedEOF within one), ErrTerminalFrame.
func (fr *FrameReader) Read() (Frame, error) {
	var head [TerminalHeadBytes]byte
	if _, err := io.ReadFull(fr.r, head[:]); err != nil {
		return Frame{}, err
	}
	typ, n := head[0], binary.BigEndian.Uint32(head[1:])
	bound, ok := maxPayload(typ)
	if !ok {
		return Frame{}, fmt.Errorf("frame of type %#x: %w", typ, ErrTerminalFrame)
	}
	if n > uint32(bound) {
		return Frame{}, fmt.Errorf("frame %q of %d bytes, past %d: %w", typ, n, bound, ErrTerminalFrame)
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n, max(int(n), 512))
	}
	p := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	f := Frame{Type: typ, Payload: p}
	return f, checkFrame(f)
}

// checkFrame refuses a payload its type cannot have.
func checkFrame(f Frame) error {
	p := f.Payload
	var bad string
	switch f.Type {
	case FrameStdin:
		if len(p) == 0 {
			bad = "empty"
		}
	case FrameResize:
		if len(p) != 4 {
			bad = "not 4 bytes"
		} else if binary.BigEndian.Uint16(p) == 0 || binary.BigEndian.Uint16(p[2:]) == 0 {
			bad = "a size of 0"
		}
	case FrameSignal, FrameRefused:
		if len(p) == 0 || !utf8.Valid(p) {
			bad = "empty or not UTF-8"
		}
	case FrameOutput:
		if len(p) <= 8 {
			bad = "no output"
		} else if int64(binary.BigEndian.Uint64(p)) < 0 {
			bad = "a negative offset"
		}
	case FrameEnd:
		if _, err := DecodeEnd(p); err != nil {
			return err
		}
	}
	if bad != "" {
		return fmt.Errorf("frame %q: %s: %w", f.Type, bad, ErrTerminalFrame)
	}
	return nil
}

// AppendFrame appends the frame of typ and payload to b. The caller keeps to the type's bound.
func AppendFrame(b []byte, typ byte, payload ...[]byte) []byte {
	n := 0
	for _, p := range payload {
		n += len(p)
	}
	b = append(b, typ)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	for _, p := range payload {
		b = append(b, p...)
	}
	return b
}

// OutputFrame is the frame of data from offset start.
func OutputFrame(b []byte, start int64, data []byte) []byte {
	b = append(b, FrameOutput)
	b = binary.BigEndian.AppendUint32(b, uint32(8+len(data)))
	b = binary.BigEndian.AppendUint64(b, uint64(start))
	return append(b, data...)
}

// DecodeOutput reads an output frame's payload, which checkFrame accepted.
func DecodeOutput(p []byte) (start int64, data []byte) {
	return int64(binary.BigEndian.Uint64(p)), p[8:]
}

// ResizeFrame is the frame of a resize to rows × cols, each 1..65535.
func ResizeFrame(rows, cols int) []byte {
	var p [4]byte
	binary.BigEndian.PutUint16(p[:], uint16(rows))
	binary.BigEndian.PutUint16(p[2:], uint16(cols))
	return AppendFrame(nil, FrameResize, p[:])
}

// DecodeResize reads a resize frame's payload, which checkFrame accepted.
func DecodeResize(p []byte) (rows, cols int) {
	return int(binary.BigEndian.Uint16(p)), int(binary.BigEndian.Uint16(p[2:]))
}

// EndFrame is the frame of e, its message cut to fit the bound.
func EndFrame(e TerminalEnd) []byte {
	for {
		b, _ := json.Marshal(e)
		if len(b) <= MaxTerminalEndBytes || e.Message == "" {
			return AppendFrame(nil, FrameEnd, b)
		}
		e.Message = sandbox.TruncateUTF8(e.Message, len(e.Message)/2)
	}
}

// DecodeEnd reads an end frame's payload. Errors: ErrTerminalFrame.
func DecodeEnd(p []byte) (TerminalEnd, error) {
	var e TerminalEnd
	if err := json.Unmarshal(p, &e); err != nil || e.Reason == "" || len(e.Reason) > 32 || e.Offset < 0 {
		return TerminalEnd{}, fmt.Errorf("end frame: %w", ErrTerminalFrame)
	}
	return e, nil
}

// RefusedFrame is the frame that says why a frame was not carried out, cut to the bound.
func RefusedFrame(msg string) []byte {
	if msg == "" {
		msg = "refused"
	}
	return AppendFrame(nil, FrameRefused, []byte(sandbox.TruncateUTF8(strings.ToValidUTF8(msg, "\uFFFD"), MaxTerminalMessage)))
}
