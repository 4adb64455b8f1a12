package agentclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// The streamed file calls go over net/http's Transport on the agent's connections: their bodies are
// streams, which the client's own transport (agenthttp) does not carry. The same distrust holds: a
// head is bounded, a JSON answer read to its bound, a read's body to the length its head announced,
// and a watch's lines one by one to protocol.MaxWatchLine.

// streamStart bounds how long a streamed call may wait for the agent to begin it: the request's
// protocol.HeaderDeadline. The stream itself runs as long as its context.
const streamStart = 30 * time.Second

// streamClient is the net/http client of a Client's streamed calls, made at the first.
type streamClient struct {
	mu sync.Mutex
	tr *http.Transport
}

func (s *streamClient) closeIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tr != nil {
		s.tr.CloseIdleConnections()
	}
}

func (c *Client) streamTransport() *http.Transport {
	c.streams.mu.Lock()
	defer c.streams.mu.Unlock()
	if c.streams.tr == nil {
		c.streams.tr = &http.Transport{
			DialContext:            c.dialStream,
			MaxIdleConns:           2,
			IdleConnTimeout:        30 * time.Second,
			ResponseHeaderTimeout:  0, // a write's answer comes after its body: the context bounds it
			MaxResponseHeaderBytes: 16 << 10,
			WriteBufferSize:        256 << 10,
			ReadBufferSize:         256 << 10,
			DisableCompression:     true,
		}
	}
	return c.streams.tr
}

func (c *Client) dialStream(ctx context.Context, _, _ string) (net.Conn, error) {
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	setSendBuffer(conn, streamSendBuffer)
	return bigWrites{conn}, nil
}

// streamSendBuffer is the send buffer of a streamed call's connection. With the default (208 KiB on
// Linux) each MiB the daemon writes wakes the agent, and the daemon after it, five times; at 4 MiB
// an upload of 1 GiB switches context about half as often on both sides, and costs them less CPU
// (docs/performance.md, "Fresh memory, and the agent's socket").
const streamSendBuffer = 4 << 20

// streamBufs are the buffers of bigWrites.ReadFrom.
var streamBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// bigWrites is a streamed call's connection to the agent. net/http's Transport sends a request body
// of known length with the connection's ReadFrom (io.Copy's 32 KiB at a time otherwise): this one
// fills 1 MiB before each write, so the agent wakes once a MiB rather than once each 32 KiB.
type bigWrites struct{ net.Conn }

func (c bigWrites) ReadFrom(r io.Reader) (int64, error) { return copyMiB(c.Conn, r) }

// copyMiB copies r to w, filling 1 MiB before each write.
func copyMiB(w io.Writer, r io.Reader) (int64, error) {
	buf := streamBufs.Get().(*[]byte)
	defer streamBufs.Put(buf)
	var n int64
	for {
		m, rerr := io.ReadFull(r, *buf)
		if m > 0 {
			k, werr := w.Write((*buf)[:m])
			n += int64(k)
			if werr != nil {
				return n, werr
			}
		}
		switch {
		case rerr == io.EOF || rerr == io.ErrUnexpectedEOF:
			return n, nil
		case rerr != nil:
			return n, rerr
		}
	}
}

// errBody marks a failure of the caller's body, as against the agent's.
type errBody struct{ err error }

func (e errBody) Error() string { return e.err.Error() }
func (e errBody) Unwrap() error { return e.err }

// watchedBody remembers the error its reader returned. At its end it calls atEnd (when set), which
// fills the request's trailer: an error of atEnd ends the body as a failure to read it would, so
// the agent never takes the body as whole.
type watchedBody struct {
	r      io.Reader
	atEnd  func() error
	ended  bool
	err    error // the reader's
	endErr error // atEnd's
}

func (b *watchedBody) Read(p []byte) (int, error) {
	if b.ended {
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	switch {
	case err == io.EOF && b.atEnd != nil:
		if b.endErr = b.atEnd(); b.endErr != nil {
			return n, b.endErr
		}
		b.ended = true
	case err == io.EOF:
		b.ended = true
	case err != nil:
		b.err = err
	}
	return n, err
}

// WriteTo sends the body a MiB at a time: a chunked body (of unknown length, or with a trailer) is
// otherwise a chunk, and a wake of the agent, each 32 KiB (see bigWrites).
func (b *watchedBody) WriteTo(w io.Writer) (int64, error) { return copyMiB(w, b) }

// stream sends one streamed request and returns its 2xx answer, whose body the caller closes. With
// a trailer, the body is sent chunked, trailer's keys declared, and atEnd fills their values once
// body has ended.
func (c *Client) stream(ctx context.Context, method, path string, q url.Values, h http.Header, body io.Reader, length int64,
	trailer http.Header, atEnd func() error) (*http.Response, error) {
	var wb *watchedBody
	var rd io.Reader
	if body != nil {
		wb = &watchedBody{r: body, atEnd: atEnd}
		rd = wb
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path+"?"+q.Encode(), rd)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %v: %w", path, err, sandbox.ErrInvalidRequest)
	}
	if body != nil {
		req.ContentLength = length // -1: chunked
		if length == 0 {
			req.Body = http.NoBody
		}
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if trailer != nil && body != nil {
		req.Trailer = trailer
		req.ContentLength = -1
		req.Body = io.NopCloser(rd)
	}
	req.Header.Set(protocol.HeaderDeadline, strconv.FormatInt(time.Now().Add(streamStart).UnixNano(), 10))
	resp, err := c.streamTransport().RoundTrip(req)
	if err != nil {
		if wb != nil && wb.endErr != nil {
			return nil, errBody{fmt.Errorf("agent %s: %w", path, wb.endErr)}
		}
		if wb != nil && wb.err != nil {
			return nil, errBody{fmt.Errorf("agent %s: the request body broke off: %v: %w", path, wb.err, sandbox.ErrInvalidRequest)}
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("agent %s: %w: %w", path, ctx.Err(), sandbox.ErrProviderUnavailable)
		}
		return nil, fmt.Errorf("agent %s: %v: %w", path, err, sandbox.ErrProviderUnavailable)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return nil, codeError(path, resp.StatusCode, raw)
}

// codeError is the error of an answer other than 2xx, as agentError says it; a 404 that is no
// protocol.Error is an agent without the route.
func codeError(path string, status int, raw []byte) error {
	var e protocol.Error
	if err := json.Unmarshal(raw, &e); err != nil || e.Code == "" {
		if status == http.StatusNotFound {
			return fmt.Errorf("agent %s: the agent has no such route (an agent of an older build): %w", path, sandbox.ErrProviderProtocol)
		}
		return fmt.Errorf("agent %s: status %d with a malformed error: %w", path, status, sandbox.ErrProviderProtocol)
	}
	msg := sandbox.TruncateUTF8(e.Message, 512)
	switch e.Code {
	case string(sandbox.CodeNotFound), string(sandbox.CodeInvalidRequest), string(sandbox.CodeRequestTooLarge), string(sandbox.CodeInvalidState):
		return fmt.Errorf("agent %s: %s: %w", path, msg, sandbox.ErrorForCode(sandbox.ErrorCode(e.Code)))
	case protocol.CodeDeadline, string(sandbox.CodeInternal), string(sandbox.CodeProviderUnavailable):
		return fmt.Errorf("agent %s: %s: %w", path, msg, sandbox.ErrProviderUnavailable)
	}
	return fmt.Errorf("agent %s: unexpected error code %q: %w", path, e.Code, sandbox.ErrProviderProtocol)
}

// readJSON reads a JSON answer of at most max bytes into out.
func readJSON(path string, resp *http.Response, max int64, out any) error {
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return fmt.Errorf("agent %s: reading the answer: %v: %w", path, err, sandbox.ErrProviderUnavailable)
	}
	if int64(len(raw)) > max {
		return fmt.Errorf("agent %s: %w", path, badAnswer("past %d bytes", max))
	}
	return decodeStrict(path, raw, out)
}

// PutFile writes a file from body (see sandbox.FileStreamer). A body that fails is an error of class
// ErrInvalidRequest, never the agent's unavailability.
func (c *Client) PutFile(ctx context.Context, put sandbox.FilePut, body io.Reader) (sandbox.FileWritten, error) {
	q := url.Values{"path": {put.Path}}
	if put.Upload != "" {
		q.Set("upload", put.Upload)
	}
	if put.Offset != 0 {
		q.Set("offset", strconv.FormatInt(put.Offset, 10))
	}
	h := http.Header{"Content-Type": {"application/octet-stream"}}
	if put.Digest != nil {
		h.Set(protocol.HeaderDigest, hex.EncodeToString(put.Digest))
	}
	// A digest known at the body's end goes on as a trailer of the same name.
	var trailer http.Header
	var atEnd func() error
	var sent atomic.Pointer[[]byte] // set by the transport's writer, read after the answer
	if put.TrailerDigest != nil {
		trailer = http.Header{protocol.HeaderDigest: nil}
		atEnd = func() error {
			sum, err := put.TrailerDigest()
			if err == nil && sum != nil {
				trailer.Set(protocol.HeaderDigest, hex.EncodeToString(sum))
				sent.Store(&sum)
			}
			return err
		}
	}
	resp, err := c.stream(ctx, http.MethodPut, protocol.PathRawFile, q, h, body, put.Length, trailer, atEnd)
	if err != nil {
		return sandbox.FileWritten{}, err
	}
	var fw protocol.FileWritten
	if err := readJSON(protocol.PathRawFile, resp, protocol.MaxFileWrittenBytes, &fw); err != nil {
		return sandbox.FileWritten{}, err
	}
	sum, err := hex.DecodeString(fw.Digest)
	if err != nil || len(sum) != 32 || fw.Path != put.Path || fw.Size < put.Offset || (put.Digest != nil && !bytes.Equal(sum, put.Digest)) ||
		(sent.Load() != nil && !bytes.Equal(sum, *sent.Load())) {
		return sandbox.FileWritten{}, fmt.Errorf("agent %s: %w", protocol.PathRawFile, badAnswer("path %.64q, size %d, digest %.80q", fw.Path, fw.Size, fw.Digest))
	}
	return sandbox.FileWritten{Path: fw.Path, Size: fw.Size, Digest: sum}, nil
}

// UploadState says how much of an upload's partial the agent holds.
func (c *Client) UploadState(ctx context.Context, path, upload string) (sandbox.FileWritten, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := c.stream(ctx, http.MethodGet, protocol.PathUpload, url.Values{"path": {path}, "upload": {upload}}, nil, nil, 0, nil, nil)
	if err != nil {
		return sandbox.FileWritten{}, err
	}
	var fw protocol.FileWritten
	if err := readJSON(protocol.PathUpload, resp, protocol.MaxFileWrittenBytes, &fw); err != nil {
		return sandbox.FileWritten{}, err
	}
	if fw.Path != path || fw.Size < 0 {
		return sandbox.FileWritten{}, fmt.Errorf("agent %s: %w", protocol.PathUpload, badAnswer("path %.64q, size %d", fw.Path, fw.Size))
	}
	return sandbox.FileWritten{Path: fw.Path, Size: fw.Size}, nil
}

// GetFile opens a raw read. The body is held to the length the answer's head announced, and its
// head to what was asked.
func (c *Client) GetFile(ctx context.Context, path string, rng *sandbox.FileRange, wantDigest bool) (*sandbox.FileRead, error) {
	h := http.Header{}
	if rng != nil {
		s := strconv.FormatInt(rng.Start, 10) + "-"
		if rng.Length >= 0 {
			s += strconv.FormatInt(rng.Start+rng.Length-1, 10)
		}
		h.Set(protocol.HeaderRange, s)
	}
	if wantDigest {
		h.Set(protocol.HeaderWantDigest, "1")
	}
	resp, err := c.stream(ctx, http.MethodGet, protocol.PathRawFile, url.Values{"path": {path}}, h, nil, 0, nil, nil)
	if err != nil {
		return nil, err
	}
	rd, err := readHead(resp, rng, wantDigest)
	if err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("agent %s: %w", protocol.PathRawFile, err)
	}
	rd.ReadCloser = &answerBody{r: io.LimitReader(resp.Body, rd.Length), c: resp.Body, left: rd.Length}
	return rd, nil
}

// readHead checks a raw read's head against what was asked.
func readHead(resp *http.Response, rng *sandbox.FileRange, wantDigest bool) (*sandbox.FileRead, error) {
	size, err1 := strconv.ParseInt(resp.Header.Get(protocol.HeaderSize), 10, 64)
	start, err2 := strconv.ParseInt(resp.Header.Get(protocol.HeaderStart), 10, 64)
	length := resp.ContentLength
	if err1 != nil || err2 != nil || size < 0 || start < 0 || length < 0 || (start < size && start+length > size) {
		return nil, badAnswer("size %q, start %q, length %d", resp.Header.Get(protocol.HeaderSize), resp.Header.Get(protocol.HeaderStart), length)
	}
	want := int64(0)
	if rng != nil {
		want = rng.Start
	}
	if start != want || (rng == nil && length != size) || (rng != nil && rng.Length >= 0 && length > rng.Length) {
		return nil, badAnswer("bytes %d+%d of %d, asked from %d", start, length, size, want)
	}
	rd := &sandbox.FileRead{Size: size, Start: start, Length: length}
	if v := resp.Header.Get(protocol.HeaderDigest); v != "" {
		sum, err := hex.DecodeString(v)
		if err != nil || len(sum) != 32 {
			return nil, badAnswer("digest %.80q", v)
		}
		rd.Digest = sum
	} else if rng == nil || wantDigest {
		return nil, badAnswer("no digest")
	}
	return rd, nil
}

// answerBody is a streamed answer's body: one that ends short of its length is unavailability.
type answerBody struct {
	r    io.Reader
	c    io.Closer
	left int64
}

func (b *answerBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if err == io.EOF && b.left > 0 {
		err = fmt.Errorf("the answer ended %d bytes short: %w", b.left, sandbox.ErrProviderUnavailable)
	} else if err != nil && err != io.EOF {
		err = fmt.Errorf("reading the answer: %v: %w", err, sandbox.ErrProviderUnavailable)
	}
	return n, err
}

func (b *answerBody) Close() error { return b.c.Close() }

// PutArchive extracts a tar stream into dir.
func (c *Client) PutArchive(ctx context.Context, dir string, body io.Reader) (sandbox.ArchiveWritten, error) {
	h := http.Header{"Content-Type": {"application/x-tar"}}
	resp, err := c.stream(ctx, http.MethodPut, protocol.PathArchive, url.Values{"path": {dir}}, h, body, -1, nil, nil)
	if err != nil {
		return sandbox.ArchiveWritten{}, err
	}
	var aw protocol.ArchiveWritten
	if err := readJSON(protocol.PathArchive, resp, protocol.MaxFileWrittenBytes, &aw); err != nil {
		return sandbox.ArchiveWritten{}, err
	}
	if aw.Path != dir || aw.Entries < 0 || aw.Bytes < 0 {
		return sandbox.ArchiveWritten{}, fmt.Errorf("agent %s: %w", protocol.PathArchive, badAnswer("path %.64q, %d entries, %d bytes", aw.Path, aw.Entries, aw.Bytes))
	}
	return sandbox.ArchiveWritten{Path: aw.Path, Entries: aw.Entries, Bytes: aw.Bytes}, nil
}

// GetArchive opens the tar stream of dir. A stream that breaks is unavailability.
func (c *Client) GetArchive(ctx context.Context, dir string) (io.ReadCloser, error) {
	resp, err := c.stream(ctx, http.MethodGet, protocol.PathArchive, url.Values{"path": {dir}}, nil, nil, 0, nil, nil)
	if err != nil {
		return nil, err
	}
	return &answerBody{r: resp.Body, c: resp.Body, left: 0}, nil
}

// Watch opens a watch of dir. The watch ends, with ErrProviderUnavailable, when the agent says
// nothing for three heartbeats (a dead agent) or its stream breaks; Hold suspends that bound while
// the sandbox is paused.
func (c *Client) Watch(ctx context.Context, dir string, recursive bool) (sandbox.FileWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	q := url.Values{"path": {dir}}
	if recursive {
		q.Set("recursive", "1")
	}
	resp, err := c.stream(ctx, http.MethodGet, protocol.PathWatch, q, nil, nil, 0, nil, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	w := &agentWatch{out: make(chan sandbox.FileChange, 64), done: make(chan struct{}), cancel: cancel}
	w.silent = time.AfterFunc(watchSilence, func() { resp.Body.Close() })
	go w.read(ctx, dir, resp.Body)
	return w, nil
}

// watchSilence is how long a watch waits for a line of the agent's (a change or a heartbeat) before
// it takes the agent for dead (a variable for the tests).
var watchSilence = 3 * protocol.WatchHeartbeatSeconds * time.Second

// agentWatch is a watch read from the agent's lines.
type agentWatch struct {
	out    chan sandbox.FileChange
	done   chan struct{}
	cancel context.CancelFunc
	err    error

	mu     sync.Mutex
	silent *time.Timer // closes the body when the agent says nothing for watchSilence
	held   bool        // the sandbox is paused: its silence is no sign of a dead agent
}

var _ sandbox.WatchHolder = (*agentWatch)(nil)

// Hold stops the silence bound while the sandbox is paused, and starts it afresh after.
func (w *agentWatch) Hold(paused bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.done:
		return // the watch ended: its timer stays stopped
	default:
	}
	w.held = paused
	if paused {
		w.silent.Stop()
	} else {
		w.silent.Reset(watchSilence)
	}
}

// heard restarts the silence bound after a line of the agent's, unless the watch is held.
func (w *agentWatch) heard() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.held {
		w.silent.Reset(watchSilence)
	}
}

func (w *agentWatch) Changes() <-chan sandbox.FileChange { return w.out }

func (w *agentWatch) Err() error {
	<-w.done
	return w.err
}

func (w *agentWatch) Close() error {
	w.cancel()
	<-w.done
	return nil
}

func (w *agentWatch) read(ctx context.Context, dir string, body io.ReadCloser) {
	defer func() {
		body.Close()
		w.cancel()
		close(w.out)
		w.mu.Lock()
		w.silent.Stop()
		close(w.done) // under mu: a Hold after it starts no timer
		w.mu.Unlock()
	}()
	br := bufio.NewReaderSize(body, protocol.MaxWatchLine)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if ctx.Err() == nil {
				if errors.Is(err, bufio.ErrBufferFull) {
					w.err = fmt.Errorf("agent watch of %q: %w", dir, badAnswer("a line past %d bytes", protocol.MaxWatchLine))
				} else {
					w.err = fmt.Errorf("agent watch of %q: the stream ended: %v: %w", dir, err, sandbox.ErrProviderUnavailable)
				}
			}
			return
		}
		w.heard()
		var l protocol.WatchLine
		if err := json.Unmarshal(line, &l); err != nil {
			w.err = fmt.Errorf("agent watch of %q: %w", dir, badAnswer("%v", err))
			return
		}
		var c sandbox.FileChange
		switch k := sandbox.FileChangeKind(l.Kind); k {
		case "heartbeat":
			continue
		case "end":
			w.err = fmt.Errorf("agent watch of %q: %s: %w", dir, sandbox.TruncateUTF8(l.Message, 512), sandbox.ErrNotFound)
			return
		case sandbox.FileOverflow:
			c = sandbox.FileChange{Kind: k}
		case sandbox.FileCreated, sandbox.FileModified, sandbox.FileDeleted, sandbox.FileRenamed:
			if l.Path == "" || (k == sandbox.FileRenamed) != (l.From != "") {
				w.err = fmt.Errorf("agent watch of %q: %w", dir, badAnswer("change %q of %.64q from %.64q", l.Kind, l.Path, l.From))
				return
			}
			c = sandbox.FileChange{Kind: k, Path: l.Path, From: l.From, Dir: l.Dir}
		default:
			w.err = fmt.Errorf("agent watch of %q: %w", dir, badAnswer("kind %.32q", l.Kind))
			return
		}
		select {
		case w.out <- c:
		case <-ctx.Done():
			return
		}
	}
}
