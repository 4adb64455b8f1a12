// Package filetest is the suite of streamed files (api/extensions.yaml, docs/files.md) run over a
// real provider through the whole daemon: raw writes and reads with their digests, ranges, resumed
// uploads, archives, watches, and the attacks on their confinement. Every answer is checked against
// the document (apitest.Transport). Only tests import it.
package filetest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/httpapi"
	"github.com/sandboxd/sandbox/httpapi/apitest"
	"github.com/sandboxd/sandbox/internal/testenv"
	"github.com/sandboxd/sandbox/internal/testenv/stack"
)

// Env is one test's daemon, client and ready sandbox.
type Env struct {
	T    testing.TB
	URL  string
	C    *client.Client
	HC   *http.Client
	SB   *sandbox.Sandbox
	St   *stack.Stack
	Prov sandbox.Provider

	// KillAgent kills the agent of a sandbox of Prov; nil where the provider has none apart from the
	// daemon.
	KillAgent func(t *testing.T, p sandbox.Provider, ref sandbox.Ref)
}

// New starts a daemon over prov, with opts, and a ready sandbox of spec in it. A test's answers are
// checked against the document; a benchmark's are not.
func New(t testing.TB, prov sandbox.Provider, spec sandbox.Spec, opts ...stack.Option) *Env {
	t.Helper()
	st := stack.New(t, prov, opts...)
	hc := &http.Client{Transport: http.DefaultTransport}
	if tt, ok := t.(*testing.T); ok {
		hc.Transport = apitest.Transport(tt, http.DefaultTransport)
	}
	c, err := client.New(st.URL, client.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	if spec.ClientRequestID == "" {
		spec.ClientRequestID = client.NewRequestID()
	}
	sb, err := c.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{T: t, URL: st.URL, C: c, HC: hc, St: st, Prov: prov}
	e.SB = e.WaitFor(sb.ID, sandbox.StateReady)
	return e
}

// WaitFor waits up to a minute for sandbox id to reach want.
func (e *Env) WaitFor(id sandbox.ID, want sandbox.State) *sandbox.Sandbox {
	e.T.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		sb, err := e.C.Get(context.Background(), id)
		if err != nil {
			e.T.Fatal(err)
		}
		if sb.State == want {
			return sb
		}
		if time.Now().After(deadline) {
			e.T.Fatalf("sandbox %s is %s, want %s", id, sb.State, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Sh runs a shell script in the sandbox and fails the test unless it exits 0.
func (e *Env) Sh(script string) string {
	e.T.Helper()
	res, err := e.C.Exec(context.Background(), e.SB.ID, e.SB.Generation, sandbox.Command{Argv: []string{"sh", "-c", script}})
	if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
		e.T.Fatalf("%s: %+v %v", script, res, err)
	}
	return res.Stdout
}

// Put writes data at path and fails the test on an error.
func (e *Env) Put(path string, data []byte) {
	e.T.Helper()
	if _, err := e.C.Upload(context.Background(), e.SB.ID, e.SB.Generation, path, bytes.NewReader(data), client.UploadOptions{}); err != nil {
		e.T.Fatalf("upload %s: %v", path, err)
	}
}

// Get reads path whole, its digest checked.
func (e *Env) Get(path string) ([]byte, error) {
	var b bytes.Buffer
	_, err := e.C.Download(context.Background(), e.SB.ID, e.SB.Generation, path, &b, client.DownloadOptions{Retries: -1})
	return b.Bytes(), err
}

// RawURL is the URL of op (raw, upload, archive, watch) for path, with more query parameters.
func (e *Env) RawURL(op, path string, more url.Values) string {
	q := url.Values{"path": {path}, "expectedGeneration": {strconv.FormatInt(int64(e.SB.Generation), 10)}}
	for k, v := range more {
		q[k] = v
	}
	return e.URL + "/v1/sandboxes/" + string(e.SB.ID) + "/files/" + op + "?" + q.Encode()
}

// Random returns n pseudo-random bytes of seed.
func Random(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

func digestHeader(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha-256=:" + base64.StdEncoding.EncodeToString(sum[:]) + ":"
}

// streamHeartbeat is the heartbeat interval of the suite's API: a watch learns of a pause, a
// terminate or a dead agent within it and a poll's slack.
const streamHeartbeat = 300 * time.Millisecond

// endBound is how long a watch may take to end once its sandbox, agent or daemon is gone: the
// heartbeat, a poll's slack, and room for a loaded machine. A watch that takes longer hangs.
const endBound = streamHeartbeat + 3*time.Second + 10*time.Second

// Run runs the suite: newProv makes a provider for each test; killAgent, if not nil, kills the agent
// of one of its sandboxes.
func Run(t *testing.T, newProv func(t *testing.T) sandbox.Provider, killAgent func(t *testing.T, p sandbox.Provider, ref sandbox.Ref)) {
	for _, tc := range []struct {
		name string
		f    func(*testing.T, *Env)
	}{
		{"RoundTrip", testRoundTrip},
		{"Range", testRange},
		{"DigestMismatchKeepsOldFile", testDigestMismatch},
		{"DigestTrailer", testDigestTrailer},
		{"DigestTrailerAttacks", testDigestTrailerAttacks},
		{"ResumeAfterBrokenBody", testResume},
		{"UploadRetriesByItself", testClientResume},
		{"SymlinkOutside", testSymlinkOutside},
		{"SymlinkSwappedDuringUpload", testSwapDuringUpload},
		{"ArchiveRoundTrip", testArchive},
		{"ArchiveEscapes", testArchiveEscapes},
		{"Watch", testWatch},
		{"WatchEndsOnTerminate", testWatchTerminate},
		{"WatchBound", testWatchBound},
		{"WatchOverflow", testWatchOverflow},
		{"WatchNeverHangs", testWatchNeverHangs},
		{"WatchPauseHolds", testWatchPauseHolds},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.NoLeaks(t)
			e := New(t, newProv(t), sandbox.Spec{}, stack.API(func(c *httpapi.Config) { c.HeartbeatInterval = streamHeartbeat }))
			e.KillAgent = killAgent
			tc.f(t, e)
		})
	}
}

func testRoundTrip(t *testing.T, e *Env) {
	data := Random(5<<20+123, 1)
	e.Put("d/big.bin", data)
	got, err := e.Get("d/big.bin")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes of %d: %v", len(got), len(data), err)
	}
	e.Put("d/empty", nil)
	if got, err := e.Get("d/empty"); err != nil || len(got) != 0 {
		t.Fatalf("empty: %q %v", got, err)
	}
	// The contract's own read sees the same file, and the write was recorded as the contract's event.
	if small, err := e.C.ReadFile(context.Background(), e.SB.ID, e.SB.Generation, "d/empty"); err != nil || len(small) != 0 {
		t.Fatalf("contract read: %q %v", small, err)
	}
	evs, err := e.C.Events(context.Background(), sandbox.EventQuery{SandboxID: e.SB.ID})
	if err != nil {
		t.Fatal(err)
	}
	written := 0
	for _, ev := range evs {
		if ev.Type == sandbox.EventFileWritten {
			written++
		}
	}
	if written != 2 {
		t.Fatalf("%d file_written events, want 2", written)
	}
	if _, err := e.Get("d/missing"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if _, err := e.Get("d"); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("a directory: %v", err)
	}
}

func testRange(t *testing.T, e *Env) {
	data := Random(1<<20, 2)
	e.Put("r.bin", data)
	for _, tc := range []struct {
		rng        string
		status     int
		start, end int
	}{
		{"bytes=0-9", 206, 0, 10},
		{"bytes=1000-", 206, 1000, len(data)},
		{"bytes=1048570-2000000", 206, 1048570, len(data)},
		{"bytes=1048576-", 416, 0, 0},
		{"bytes=-5", 200, 0, len(data)}, // a suffix range: the whole file
	} {
		req, _ := http.NewRequest("GET", e.RawURL("raw", "r.bin", nil), nil)
		req.Header.Set("Range", tc.rng)
		resp, err := e.HC.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Fatalf("%s: status %d, want %d: %s", tc.rng, resp.StatusCode, tc.status, body)
		}
		if tc.status == 416 {
			if cr := resp.Header.Get("Content-Range"); cr != "bytes */1048576" {
				t.Fatalf("416 Content-Range %q", cr)
			}
			continue
		}
		if !bytes.Equal(body, data[tc.start:tc.end]) {
			t.Fatalf("%s: %d bytes, not the range", tc.rng, len(body))
		}
		if resp.ContentLength != int64(tc.end-tc.start) {
			t.Fatalf("%s: Content-Length %d", tc.rng, resp.ContentLength)
		}
		if tc.status == 200 && resp.Header.Get("Repr-Digest") != digestHeader(data) {
			t.Fatalf("whole read: Repr-Digest %q", resp.Header.Get("Repr-Digest"))
		}
	}
	rc, err := e.C.ReadRange(context.Background(), e.SB.ID, e.SB.Generation, "r.bin", 100, 50)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, data[100:150]) {
		t.Fatalf("ReadRange: %d bytes", len(got))
	}
}

// put sends one raw PUT and returns its status and body.
func (e *Env) put(u string, body io.Reader, length int64, h http.Header) (int, string) {
	e.T.Helper()
	req, _ := http.NewRequest("PUT", u, body)
	req.ContentLength = length
	return e.send(req, h)
}

// send sends req with the headers h and returns its status and body.
func (e *Env) send(req *http.Request, h http.Header) (int, string) {
	req.Header.Set("Content-Type", "application/octet-stream")
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := e.HC.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func testDigestMismatch(t *testing.T, e *Env) {
	e.Put("f.txt", []byte("old"))
	data := Random(3<<20, 3)
	st, body := e.put(e.RawURL("raw", "f.txt", nil), bytes.NewReader(data), int64(len(data)),
		http.Header{"Repr-Digest": {digestHeader([]byte("something else"))}})
	if st != 400 || !strings.Contains(body, "invalid_request") {
		t.Fatalf("mismatch: %d %s", st, body)
	}
	if got, err := e.Get("f.txt"); err != nil || string(got) != "old" {
		t.Fatalf("after a mismatch: %q %v", got, err)
	}
	if out := e.Sh("ls -a | grep -c tmp || true"); strings.TrimSpace(out) != "0" {
		t.Fatalf("a temporary is left: %s", e.Sh("ls -a"))
	}
	// A digest that matches is taken.
	if st, body := e.put(e.RawURL("raw", "f.txt", nil), bytes.NewReader(data), int64(len(data)),
		http.Header{"Repr-Digest": {digestHeader(data)}}); st != 200 || !strings.Contains(body, digestHeader(data)[9:]) {
		t.Fatalf("match: %d %s", st, body)
	}
	if st, _ := e.put(e.RawURL("raw", "f.txt", nil), strings.NewReader("x"), 1, http.Header{"Repr-Digest": {"sha-256=:nope:"}}); st != 400 {
		t.Fatalf("a malformed digest: %d", st)
	}
}

// putTrailer sends one raw PUT of body, chunked, with trailer (its values final up front) and h,
// and returns its status and body.
func (e *Env) putTrailer(u string, body []byte, trailer, h http.Header) (int, string) {
	e.T.Helper()
	req, _ := http.NewRequest("PUT", u, io.NopCloser(bytes.NewReader(body)))
	req.ContentLength = -1
	req.Trailer = trailer
	return e.send(req, h)
}

// putWire sends one raw PUT to u as the bytes head+body (head without its request line's method and
// target nor Host, ending before the blank line) on a connection of its own: what net/http's client
// never sends. It returns the answer's status and body.
func (e *Env) putWire(u, head, body string) (int, string) {
	e.T.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		e.T.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", pu.Host, 5*time.Second)
	if err != nil {
		e.T.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, "PUT "+pu.RequestURI()+" HTTP/1.1\r\nHost: "+pu.Host+"\r\nConnection: close\r\n"+
		"Content-Type: application/octet-stream\r\n"+head+"\r\n"+body); err != nil {
		return 0, err.Error()
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// chunked is data as one chunk and the last, without the trailer section's end.
func chunked(data string) string {
	return strconv.FormatInt(int64(len(data)), 16) + "\r\n" + data + "\r\n0\r\n"
}

// testDigestTrailer: a digest sent after the body, as its trailer, is checked before the rename; the
// Go client sends one whenever it is not given the digest (from a file: Put; from a pipe); a resumed
// upload's is the digest of the whole file (the client's own resume: testClientResume).
func testDigestTrailer(t *testing.T, e *Env) {
	e.Put("t.bin", []byte("old"))
	data := Random(3<<20+17, 6)
	if st, body := e.putTrailer(e.RawURL("raw", "t.bin", nil), data, http.Header{"Repr-Digest": {digestHeader(data)}}, nil); st != 200 || !strings.Contains(body, digestHeader(data)[9:]) {
		t.Fatalf("a trailer that matches: %d %s", st, body)
	}
	if got, err := e.Get("t.bin"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after a trailer that matches: %d bytes %v", len(got), err)
	}
	// A header and a trailer that agree; a trailer declared and not sent checks nothing more.
	if st, body := e.putTrailer(e.RawURL("raw", "t.bin", nil), []byte("two"), http.Header{"Repr-Digest": {digestHeader([]byte("two"))}},
		http.Header{"Repr-Digest": {digestHeader([]byte("two"))}}); st != 200 {
		t.Fatalf("header and trailer agree: %d %s", st, body)
	}
	if st, body := e.putTrailer(e.RawURL("raw", "t.bin", nil), []byte("three"), http.Header{"Repr-Digest": nil}, nil); st != 200 {
		t.Fatalf("a trailer declared, none sent: %d %s", st, body)
	}
	// The Go client from a pipe (no io.Seeker, no size): the trailer is checked before the rename.
	pr, pw := io.Pipe()
	go func() {
		_, err := pw.Write(data)
		pw.CloseWithError(err)
	}()
	if res, err := e.C.Upload(context.Background(), e.SB.ID, e.SB.Generation, "t.bin", pr, client.UploadOptions{}); err != nil || res.Size != int64(len(data)) {
		t.Fatalf("upload from a pipe: %+v %v", res, err)
	}
	if got, err := e.Get("t.bin"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after the pipe: %d bytes %v", len(got), err)
	}
	// A resumed upload's trailer is the whole file's digest: the first 1 MiB sent by hand, the rest
	// by the client from the offset the sandbox holds.
	const upload = "trailer-resume-1"
	st, msg := e.put(e.RawURL("raw", "r.bin", url.Values{"upload": {upload}}), &brokenReader{data: data, n: 1 << 20}, int64(len(data)), nil)
	if st != 0 {
		t.Fatalf("a broken body answered %d %s", st, msg)
	}
	var off int64
	for deadline := time.Now().Add(10 * time.Second); off == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		s, err := e.C.UploadState(context.Background(), e.SB.ID, e.SB.Generation, "r.bin", upload)
		if err != nil {
			t.Fatal(err)
		}
		off = s.Offset
	}
	if off <= 0 {
		t.Fatal("the partial holds nothing")
	}
	if st, body := e.putTrailer(e.RawURL("raw", "r.bin", url.Values{"upload": {upload}, "offset": {strconv.FormatInt(off, 10)}}), data[off:],
		http.Header{"Repr-Digest": {digestHeader(data)}}, nil); st != 200 {
		t.Fatalf("resume at %d with the whole file's digest: %d %s", off, st, body)
	}
	if got, err := e.Get("r.bin"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after the resume: %d bytes %v", len(got), err)
	}
}

// testDigestTrailerAttacks: each malformed or unexpected trailer is a 400, and the old file stays.
func testDigestTrailerAttacks(t *testing.T, e *Env) {
	e.Put("a.txt", []byte("old"))
	data := []byte("new bytes")
	other := []byte("something else")
	u := e.RawURL("raw", "a.txt", nil)
	for _, tc := range []struct {
		name       string
		st         int
		trailer, h http.Header
	}{
		{"mismatch", 400, http.Header{"Repr-Digest": {digestHeader(other)}}, nil},
		{"malformed", 400, http.Header{"Repr-Digest": {"sha-256=:nope:"}}, nil},
		{"short", 400, http.Header{"Repr-Digest": {"sha-256=:" + base64.StdEncoding.EncodeToString([]byte("short")) + ":"}}, nil},
		{"header and trailer disagree", 400, http.Header{"Repr-Digest": {digestHeader(data)}}, http.Header{"Repr-Digest": {digestHeader(other)}}},
		{"trailer and header disagree", 400, http.Header{"Repr-Digest": {digestHeader(other)}}, http.Header{"Repr-Digest": {digestHeader(data)}}},
		{"another trailer", 400, http.Header{"Repr-Digest": {digestHeader(data)}, "X-Other": {"1"}}, nil},
		{"another trailer alone", 400, http.Header{"Sandbox-Digest": {hexOf(data)}}, nil},
		{"oversized", 400, http.Header{"Repr-Digest": {digestHeader(data) + ", " + strings.Repeat("x=1, ", 2000)}}, nil},
	} {
		st, body := e.putTrailer(u, data, tc.trailer, tc.h)
		if st == 0 && tc.name == "oversized" {
			st, body = 400, "cut off" // the daemon may close the connection before the client reads the answer
		}
		if st != tc.st || (st == 400 && !strings.Contains(body, "invalid_request") && body != "cut off") {
			t.Fatalf("%s: %d %s", tc.name, st, body)
		}
		if got, err := e.Get("a.txt"); err != nil || string(got) != "old" {
			t.Fatalf("%s: the file after: %q %v", tc.name, got, err)
		}
	}
	// What net/http's client never sends: a trailer undeclared, one after a body that is not chunked.
	for _, tc := range []struct{ name, head, body string }{
		{"undeclared trailer", "Transfer-Encoding: chunked\r\n", chunked(string(data)) + "X-Other: 1\r\nRepr-Digest: " + digestHeader(data) + "\r\n\r\n"},
		{"undeclared mismatch", "Transfer-Encoding: chunked\r\n", chunked(string(data)) + "Repr-Digest: " + digestHeader(other) + "\r\n\r\n"},
		{"trailer on a body of known length", "Trailer: Repr-Digest\r\nContent-Length: " + strconv.Itoa(len(data)) + "\r\n", string(data)},
	} {
		if st, body := e.putWire(u, tc.head, tc.body); st != 400 || !strings.Contains(body, "invalid_request") {
			t.Fatalf("%s: %d %s", tc.name, st, body)
		}
		if got, err := e.Get("a.txt"); err != nil || string(got) != "old" {
			t.Fatalf("%s: the file after: %q %v", tc.name, got, err)
		}
	}
	if out := e.Sh("ls -a | grep -c -e tmp -e upload- || true"); strings.TrimSpace(out) != "0" {
		t.Fatalf("a temporary is left: %s", e.Sh("ls -a"))
	}
}

func hexOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// brokenReader returns n bytes of data, then fails.
type brokenReader struct {
	data []byte
	n    int
}

func (b *brokenReader) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, errors.New("connection killed")
	}
	k := copy(p, b.data[:min(len(b.data), b.n, len(p))])
	b.data, b.n = b.data[k:], b.n-k
	return k, nil
}

func testResume(t *testing.T, e *Env) {
	e.Put("up.bin", []byte("old"))
	data := Random(8<<20, 4)
	const upload = "resume-test-1"
	// The body breaks off after 3 MiB: the client's connection is closed mid-body.
	st, msg := e.put(e.RawURL("raw", "up.bin", url.Values{"upload": {upload}}), &brokenReader{data: data, n: 3 << 20}, int64(len(data)),
		http.Header{"Repr-Digest": {digestHeader(data)}})
	if st != 0 {
		t.Fatalf("a broken body answered %d %s", st, msg)
	}
	if got, err := e.Get("up.bin"); err != nil || string(got) != "old" {
		t.Fatalf("while the upload is partial: %q %v", got, err)
	}
	var off int64
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := e.C.UploadState(context.Background(), e.SB.ID, e.SB.Generation, "up.bin", upload)
		if err != nil {
			t.Fatal(err)
		}
		off = s.Offset
		if off > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if off <= 0 || off > 3<<20 {
		t.Fatalf("the partial holds %d bytes", off)
	}
	// An offset past the partial is refused.
	if st, body := e.put(e.RawURL("raw", "up.bin", url.Values{"upload": {upload}, "offset": {strconv.FormatInt(off+1, 10)}}),
		bytes.NewReader(data[off+1:]), int64(len(data))-off-1, nil); st != 409 {
		t.Fatalf("past the partial: %d %s", st, body)
	}
	st, body := e.put(e.RawURL("raw", "up.bin", url.Values{"upload": {upload}, "offset": {strconv.FormatInt(off, 10)}}),
		bytes.NewReader(data[off:]), int64(len(data))-off, http.Header{"Repr-Digest": {digestHeader(data)}})
	if st != 200 {
		t.Fatalf("resume at %d: %d %s", off, st, body)
	}
	if got, err := e.Get("up.bin"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after the resume: %d bytes, %v", len(got), err)
	}
	if s, err := e.C.UploadState(context.Background(), e.SB.ID, e.SB.Generation, "up.bin", upload); err != nil || s.Offset != 0 {
		t.Fatalf("the partial after completion: %+v %v", s, err)
	}
}

// flakySource is a file-like source whose first read past failAt fails once.
type flakySource struct {
	*bytes.Reader
	failAt, pos int64
	failed      bool
	passes      int // reads from the start: the first sends, hashing as it goes
}

func (f *flakySource) Read(p []byte) (int, error) {
	if !f.failed && f.pos+int64(len(p)) > f.failAt && f.passes >= 1 {
		f.failed = true
		return 0, errors.New("network down")
	}
	n, err := f.Reader.Read(p)
	f.pos += int64(n)
	return n, err
}

func (f *flakySource) Seek(off int64, whence int) (int64, error) {
	n, err := f.Reader.Seek(off, whence)
	if whence == io.SeekStart && off == 0 {
		f.passes++
	}
	f.pos = n
	return n, err
}

func testClientResume(t *testing.T, e *Env) {
	data := Random(6<<20, 5)
	src := &flakySource{Reader: bytes.NewReader(data), failAt: 4 << 20}
	var last int64
	res, err := e.C.Upload(context.Background(), e.SB.ID, e.SB.Generation, "auto.bin", src, client.UploadOptions{Progress: func(n int64) { last = n }})
	if err != nil {
		t.Fatal(err)
	}
	if !src.failed || res.Size != int64(len(data)) || last != int64(len(data)) {
		t.Fatalf("failed %v, %+v, progress %d", src.failed, res, last)
	}
	if got, err := e.Get("auto.bin"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %d %v", len(got), err)
	}
}

func testSymlinkOutside(t *testing.T, e *Env) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.Sh("ln -s " + outside + " out && ln -s ../../../../../../../.. up && ln -s " + secret + " sec")
	for _, p := range []string{"out/planted", "up" + outside + "/planted", outside + "/planted"} {
		_, _ = e.C.Upload(context.Background(), e.SB.ID, e.SB.Generation, p, strings.NewReader("x"), client.UploadOptions{})
	}
	if _, err := e.C.UploadArchive(context.Background(), e.SB.ID, e.SB.Generation, "out", tarOf(t, entry{name: "planted2", body: "x"})); err == nil {
		// Extracted into the sandbox's own "out", never the host's.
		_ = err
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("a file was planted outside the sandbox: %v", ents)
	}
	for _, p := range []string{"sec", "out/secret", "up" + secret, secret} {
		if got, err := e.Get(p); err == nil && string(got) == "host secret" {
			t.Fatalf("%s read a file outside the sandbox", p)
		}
	}
	// The archive of a directory holding a link to a file outside holds the link, not the file.
	rc, err := e.C.DownloadArchive(context.Background(), e.SB.ID, e.SB.Generation, ".")
	if err != nil {
		t.Fatal(err)
	}
	all, _ := io.ReadAll(rc)
	rc.Close()
	if bytes.Contains(all, []byte("host secret")) {
		t.Fatal("the archive holds a file outside the sandbox")
	}
}

// slowReader hands out data after start is closed.
type gatedReader struct {
	first []byte
	rest  []byte
	gate  chan struct{}
}

func (g *gatedReader) Read(p []byte) (int, error) {
	if len(g.first) > 0 {
		n := copy(p, g.first)
		g.first = g.first[n:]
		return n, nil
	}
	if g.gate != nil {
		<-g.gate
		g.gate = nil
	}
	if len(g.rest) == 0 {
		return 0, io.EOF
	}
	n := copy(p, g.rest)
	g.rest = g.rest[n:]
	return n, nil
}

func testSwapDuringUpload(t *testing.T, e *Env) {
	outside := t.TempDir()
	e.Sh("mkdir -p d")
	data := Random(4<<20, 6)
	gate := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := e.C.Upload(context.Background(), e.SB.ID, e.SB.Generation, "d/f", &gatedReader{first: data[:1<<20], rest: data[1<<20:], gate: gate},
			client.UploadOptions{Size: int64(len(data)), Retries: -1})
		done <- err
	}()
	time.Sleep(500 * time.Millisecond) // the write is under way
	e.Sh("mv d d.old && ln -s " + outside + " d")
	close(gate)
	if err := <-done; err != nil {
		t.Logf("the upload: %v", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("the upload went through the swapped symlink: %v", ents)
	}
}

type entry struct {
	name, body, link string
	typ              byte
}

func tarOf(t *testing.T, entries ...entry) io.Reader {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, en := range entries {
		h := &tar.Header{Name: en.name, Mode: 0o644, Typeflag: en.typ, Linkname: en.link}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(en.body))
		}
		if h.Typeflag == tar.TypeDir {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			io.WriteString(tw, en.body)
		}
	}
	tw.Close()
	return &b
}

func testArchive(t *testing.T, e *Env) {
	res, err := e.C.UploadArchive(context.Background(), e.SB.ID, e.SB.Generation, "tree", tarOf(t,
		entry{name: "a/", typ: tar.TypeDir},
		entry{name: "a/one.txt", body: "one"},
		entry{name: "./two.txt", body: "two"},
		entry{name: "link", typ: tar.TypeSymlink, link: "a/one.txt"},
		entry{name: "hard", typ: tar.TypeLink, link: "two.txt"},
	))
	if err != nil || res.Entries != 5 || res.Bytes != 6 {
		t.Fatalf("extract: %+v %v", res, err)
	}
	if out := e.Sh("cat tree/a/one.txt tree/two.txt tree/hard; readlink tree/link"); out != "onetwotwoa/one.txt\n" {
		t.Fatalf("extracted: %q", out)
	}
	rc, err := e.C.DownloadArchive(context.Background(), e.SB.ID, e.SB.Generation, "tree")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	seen := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		seen[h.Name] = fmt.Sprintf("%c:%s:%s", h.Typeflag, b, h.Linkname)
	}
	want := map[string]string{"a/": "5::", "a/one.txt": "0:one:", "two.txt": "0:two:", "link": "2::a/one.txt", "hard": "0:two:"}
	for k, v := range want {
		if seen[k] != v {
			t.Fatalf("archive: %q is %q, want %q (all: %v)", k, seen[k], v, seen)
		}
	}
	if _, err := e.C.DownloadArchive(context.Background(), e.SB.ID, e.SB.Generation, "nowhere"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("a missing directory: %v", err)
	}
}

func testArchiveEscapes(t *testing.T, e *Env) {
	outside := t.TempDir()
	for _, tc := range [][]entry{
		{{name: "../escape", body: "x"}},
		{{name: "a/../../escape", body: "x"}},
		{{name: "/abs", body: "x"}},
		{{name: "sym", typ: tar.TypeSymlink, link: outside}, {name: "sym/planted", body: "x"}},
		{{name: "rel", typ: tar.TypeSymlink, link: "../../../../../../../../" + outside}, {name: "rel/planted", body: "x"}},
		{{name: "dev", typ: tar.TypeChar}},
		{{name: "fifo", typ: tar.TypeFifo}},
		{{name: "hl", typ: tar.TypeLink, link: "../../etc/passwd"}},
		{{name: strings.Repeat("n/", 3000) + "x", body: "x"}},
	} {
		_, err := e.C.UploadArchive(context.Background(), e.SB.ID, e.SB.Generation, "box", tarOf(t, tc...))
		if !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Fatalf("%+v: %v", tc, err)
		}
	}
	if _, err := e.C.UploadArchive(context.Background(), e.SB.ID, e.SB.Generation, "box", strings.NewReader("not a tar at all, and more than 512 bytes"+strings.Repeat("!", 600))); !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("not a tar: %v", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("planted outside: %v", ents)
	}
	if out := e.Sh("ls -a; ls -a box 2>/dev/null || true"); strings.Contains(out, "escape") || strings.Contains(out, "abs") {
		t.Fatalf("an escaping entry was written: %s", out)
	}
}

func nextChange(t *testing.T, w *client.FileWatch, kind, path string) {
	t.Helper()
	for {
		ev, err := w.Next()
		if err != nil {
			t.Fatalf("waiting for %s %s: %v", kind, path, err)
		}
		if ev.Kind == kind && ev.Path == path {
			return
		}
	}
}

func testWatch(t *testing.T, e *Env) {
	e.Sh("mkdir -p w/sub")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := e.C.WatchFiles(ctx, e.SB.ID, e.SB.Generation, "w", true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	e.Put("w/a.txt", []byte("a"))
	nextChange(t, w, "renamed", "w/a.txt") // the temporary renamed over it
	e.Sh("echo more >> w/a.txt")
	nextChange(t, w, "modified", "w/a.txt")
	e.Sh("echo x > w/sub/deep.txt")
	nextChange(t, w, "created", "w/sub/deep.txt")
	e.Sh("mv w/sub/deep.txt w/moved.txt")
	nextChange(t, w, "renamed", "w/moved.txt")
	e.Sh("rm w/a.txt")
	nextChange(t, w, "deleted", "w/a.txt")
	e.Sh("mkdir w/new && echo y > w/new/in.txt")
	nextChange(t, w, "created", "w/new/in.txt")
	if _, err := e.C.WatchFiles(ctx, e.SB.ID, e.SB.Generation, "w/nowhere", false); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("a missing directory: %v", err)
	}
	e.Sh("rm -r w")
	for {
		ev, err := w.Next()
		if err != nil {
			t.Fatalf("after the directory went: %v", err)
		}
		if ev.Kind == "end" {
			break
		}
	}
}

func testWatchTerminate(t *testing.T, e *Env) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := e.C.WatchFiles(ctx, e.SB.ID, e.SB.Generation, ".", false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := e.C.Terminate(ctx, e.SB.ID, e.SB.Generation); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := w.Next()
		if err != nil {
			t.Fatalf("after terminate: %v", err)
		}
		if ev.Kind == "end" {
			if ev.Reason != client.ProcessEndTerminated {
				t.Fatalf("end: %+v", ev)
			}
			return
		}
	}
}

func testWatchBound(t *testing.T, e *Env) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ws []*client.FileWatch
	defer func() {
		for _, w := range ws {
			w.Close()
		}
	}()
	for range sandbox.MaxWatches {
		w, err := e.C.WatchFiles(ctx, e.SB.ID, e.SB.Generation, ".", false)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	if _, err := e.C.WatchFiles(ctx, e.SB.ID, e.SB.Generation, ".", false); !errors.Is(err, sandbox.ErrInvalidState) {
		t.Fatalf("one watch too many: %v", err)
	}
	ws[0].Close()
	ws = ws[1:]
	deadline := time.Now().Add(10 * time.Second)
	for {
		w, err := e.C.WatchFiles(ctx, e.SB.ID, e.SB.Generation, ".", false)
		if err == nil {
			ws = append(ws, w)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after one closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// testWatchOverflow: a recursive watch of a tree of more directories than one watch follows says so
// with an overflow event on the HTTP stream, and goes on with the changes it can see.
func testWatchOverflow(t *testing.T, e *Env) {
	e.Sh("mkdir ov && cd ov && seq 8200 | xargs mkdir")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := e.C.WatchFiles(ctx, e.SB.ID, e.SB.Generation, "ov", true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for {
		ev, err := w.Next()
		if err != nil {
			t.Fatalf("waiting for the overflow: %v", err)
		}
		if ev.Kind == "overflow" {
			if ev.Path != "" || ev.Reason != "" {
				t.Fatalf("overflow: %+v", ev)
			}
			break
		}
		if ev.Kind == "end" {
			t.Fatalf("the watch ended before an overflow: %+v", ev)
		}
	}
	e.Sh("echo x > ov/after.txt")
	nextChange(t, w, "created", "ov/after.txt")
}

// watchEnd reads w until its end event, which it returns; a watch that has none within endBound is
// closed, and fails the test.
func watchEnd(t *testing.T, what string, w *client.FileWatch) client.FileEvent {
	t.Helper()
	timer := time.AfterFunc(endBound, func() { w.Close() })
	defer timer.Stop()
	for {
		ev, err := w.Next()
		if err != nil {
			t.Fatalf("%s: no end event within %v: %v", what, endBound, err)
		}
		if ev.Kind == "end" {
			return ev
		}
	}
}

// testWatchNeverHangs: an idle watch carries a heartbeat comment each interval; a pause (where the
// provider pauses) holds a watch, its heartbeats saying so, until the resume; a watch ends with an end
// event saying why, within the heartbeat bound, when its agent is killed (where it has one), and when
// the daemon's API closes.
func testWatchNeverHangs(t *testing.T, e *Env) {
	e.Sh("mkdir -p idle")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	testenv.SSEHeartbeat(t, &http.Client{Transport: apitest.Transport(t, tr)}, e.RawURL("watch", "idle", nil), endBound)

	m, err := e.Prov.Manifest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// open opens a watch of sb's working directory.
	open := func(sb *sandbox.Sandbox) *client.FileWatch {
		w, err := e.C.WatchFiles(context.Background(), sb.ID, sb.Generation, ".", false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		return w
	}
	if m.Capabilities.PauseResume {
		w := open(e.SB)
		if _, err := e.C.Pause(context.Background(), e.SB.ID, e.SB.Generation); err != nil {
			t.Fatal(err)
		}
		nextHeartbeat(t, w, client.StreamPaused)
		if _, err := e.C.Resume(context.Background(), e.SB.ID, e.SB.Generation); err != nil {
			t.Fatal(err)
		}
		nextHeartbeat(t, w, client.StreamRunning)
		e.WaitFor(e.SB.ID, sandbox.StateReady)
		w.Close()
	}
	if e.KillAgent != nil {
		w := open(e.SB)
		e.KillAgent(t, e.Prov, e.SB.Ref())
		if ev := watchEnd(t, "agent killed", w); ev.Reason != client.ProcessEndAgent && ev.Reason != client.ProcessEndTerminated {
			t.Fatalf("end after the agent was killed: %+v", ev)
		}
	}
	sb, err := e.C.Create(context.Background(), sandbox.Spec{ClientRequestID: client.NewRequestID()})
	if err != nil {
		t.Fatal(err)
	}
	sb = e.WaitFor(sb.ID, sandbox.StateReady)
	w := open(sb)
	e.St.API.Close()
	if ev := watchEnd(t, "API closed", w); ev.Reason != client.ProcessEndDaemonStopping {
		t.Fatalf("end after the API closed: %+v", ev)
	}
}

// nextHeartbeat reads w until a heartbeat event saying state, passing over changes; an end first
// fails the test.
func nextHeartbeat(t *testing.T, w *client.FileWatch, state string) {
	t.Helper()
	timer := time.AfterFunc(endBound, func() { w.Close() })
	defer timer.Stop()
	ev, err := w.Next()
	for ; err == nil && ev.Kind != "end" && (ev.Kind != "heartbeat" || ev.State != state); ev, err = w.Next() {
	}
	if err != nil || ev.Kind != "heartbeat" {
		t.Fatalf("waiting for a heartbeat saying %s: %+v, %v", state, ev, err)
	}
}

// testWatchPauseHolds: a process in the sandbox makes a file every 10 ms under a watched directory
// while the sandbox is paused for a while: the watch's heartbeats say paused and no change comes
// until one says running after the resume, and every file's creation comes once, in order; a watch
// whose client goes away during the pause ends meanwhile; a terminate while paused ends the watch
// with its end event within the heartbeat bound.
func testWatchPauseHolds(t *testing.T, e *Env) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := e.Prov.Manifest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Capabilities.PauseResume {
		if _, err := e.C.Pause(ctx, e.SB.ID, e.SB.Generation); !errors.Is(err, sandbox.ErrUnsupportedCapability) {
			t.Fatalf("pause where the provider does not pause: %v", err)
		}
		return
	}
	e.Sh("mkdir -p pw")
	w, err := e.C.WatchFiles(ctx, e.SB.ID, e.SB.Generation, "pw", false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	gone, err := e.C.WatchFiles(ctx, e.SB.ID, e.SB.Generation, "pw", false)
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	const n = 300
	if _, err := e.C.StartProcess(ctx, e.SB.ID, e.SB.Generation, sandbox.ProcessSpec{Argv: []string{"sh", "-c",
		fmt.Sprintf("i=0; while [ $i -lt %d ]; do echo $i > pw/f$i; i=$((i+1)); sleep 0.01; done", n)}}); err != nil {
		t.Fatal(err)
	}
	var created []string
	next := func() client.FileEvent {
		t.Helper()
		ev, err := w.Next()
		if err != nil || ev.Kind == "end" || ev.Kind == "overflow" {
			t.Fatalf("after %d files: %+v, %v", len(created), ev, err)
		}
		if ev.Kind == "created" {
			if want := fmt.Sprintf("pw/f%d", len(created)); ev.Path != want {
				t.Fatalf("created %q, want %q", ev.Path, want)
			}
			created = append(created, ev.Path)
		}
		return ev
	}
	for len(created) == 0 {
		next()
	}
	if _, err := e.C.Pause(ctx, e.SB.ID, e.SB.Generation); err != nil {
		t.Fatal(err)
	}
	// Changes the watch passed on before it learnt of the pause may come first; none after its first
	// heartbeat saying paused.
	for ev := next(); ev.Kind != "heartbeat" || ev.State != client.StreamPaused; ev = next() {
		if ev.Kind == "heartbeat" {
			t.Fatalf("before the paused heartbeat: %+v", ev)
		}
	}
	at := len(created)
	e.WaitFor(e.SB.ID, sandbox.StatePaused)
	if !w.Paused() {
		t.Fatal("the watch does not say paused")
	}
	// Both watches wait out the pause; the one whose client goes away ends meanwhile.
	testenv.WaitFor(t, "two watches waiting out the pause", func() bool { return testenv.GoroutinesIn(testenv.StreamPaused) == 2 })
	gone.Close()
	testenv.WaitFor(t, "the closed watch's end", func() bool { return testenv.GoroutinesIn(testenv.StreamPaused) == 1 })
	time.Sleep(2 * time.Second)
	for range 2 {
		if ev := next(); ev.Kind != "heartbeat" || ev.State != client.StreamPaused {
			t.Fatalf("while paused: %+v", ev)
		}
	}
	if _, err := e.C.Resume(ctx, e.SB.ID, e.SB.Generation); err != nil {
		t.Fatal(err)
	}
	for ev := next(); ev.Kind != "heartbeat" || ev.State != client.StreamRunning; ev = next() {
		if ev.Kind != "heartbeat" || ev.State != client.StreamPaused {
			t.Fatalf("before the running heartbeat: %+v", ev)
		}
	}
	for len(created) < n {
		next()
	}
	if at == n || w.Paused() {
		t.Fatalf("all %d files were made before the pause (paused %v)", at, w.Paused())
	}

	// A terminate while paused ends the watch.
	if _, err := e.C.Pause(ctx, e.SB.ID, e.SB.Generation); err != nil {
		t.Fatal(err)
	}
	nextHeartbeat(t, w, client.StreamPaused)
	if _, err := e.C.Terminate(ctx, e.SB.ID, e.SB.Generation); err != nil {
		t.Fatal(err)
	}
	if ev := watchEnd(t, "terminate while paused", w); ev.Reason != client.ProcessEndTerminated {
		t.Fatalf("end after a terminate while paused: %+v", ev)
	}
}
