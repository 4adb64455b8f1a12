package agentclient_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
	"github.com/sandboxd/sandbox/agent/protocol"
)

// recordedConn notes the size of every write to the agent.
type recordedConn struct {
	net.Conn
	mu     *sync.Mutex
	writes *[]int
}

func (c recordedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	*c.writes = append(*c.writes, len(p))
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// trickle hands out its bytes 4 KiB a read, then fails with err (io.EOF: ends).
type trickle struct {
	data []byte
	err  error
}

func (t *trickle) Read(p []byte) (int, error) {
	if len(t.data) == 0 {
		return 0, t.err
	}
	n := copy(p[:min(len(p), 4<<10)], t.data)
	t.data = t.data[n:]
	return n, nil
}

// rawAgent serves PathRawFile, keeping the bytes each put delivered, and returns a client of it
// whose writes to the agent are recorded.
func rawAgent(t *testing.T) (*agentclient.Client, func() []byte, func() []int) {
	t.Helper()
	var mu sync.Mutex
	var got []byte
	var writes []int
	done := make(chan struct{}, 8)
	sock := serveUnix(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = body
		mu.Unlock()
		done <- struct{}{}
		sum := sha256.Sum256(body)
		json.NewEncoder(w).Encode(protocol.FileWritten{Path: r.URL.Query().Get("path"), Size: int64(len(body)), Digest: hex.EncodeToString(sum[:])})
	})})
	c := recordingClient(t, sock, &mu, &writes)
	return c, func() []byte { <-done; mu.Lock(); defer mu.Unlock(); return got }, func() []int { mu.Lock(); defer mu.Unlock(); return append([]int(nil), writes...) }
}

// recordingClient is a client of the agent at sock whose writes to it are noted in writes.
func recordingClient(t *testing.T, sock string, mu *sync.Mutex, writes *[]int) *agentclient.Client {
	var d net.Dialer
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) {
		conn, err := d.DialContext(ctx, "unix", sock)
		if err != nil {
			return nil, err
		}
		return recordedConn{conn, mu, writes}, nil
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// A streamed write reaches the agent a MiB at a time however small the reads of its body, and every
// byte of it arrives.
func TestPutFileWritesAMiBAtATime(t *testing.T) {
	c, got, writes := rawAgent(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), (3<<20+5000)/16)
	sum := sha256.Sum256(data)
	fw, err := c.PutFile(bounded(t), sandbox.FilePut{Path: "f", Length: int64(len(data)), Digest: sum[:]}, &trickle{data: data, err: io.EOF})
	if err != nil {
		t.Fatal(err)
	}
	if fw.Size != int64(len(data)) || !bytes.Equal(fw.Digest, sum[:]) || !bytes.Equal(got(), data) {
		t.Fatalf("agent got %d bytes, answer %+v; sent %d", len(got()), fw, len(data))
	}
	mib := 0
	for _, n := range writes() {
		if n == 1<<20 {
			mib++
		}
	}
	if mib != 3 {
		t.Fatalf("writes to the agent: %v; want 3 of 1 MiB", writes())
	}
}

// A body that breaks off in the middle of a MiB: what was read of it still reaches the agent (an
// upload's partial goes on from there), and the error is the body's.
func TestPutFileDeliversABrokenBodysBytes(t *testing.T) {
	c, got, _ := rawAgent(t)
	data := bytes.Repeat([]byte("x"), 1<<20+1<<19)
	broke := errors.New("the client went away")
	_, err := c.PutFile(bounded(t), sandbox.FilePut{Path: "f", Upload: "upload-1", Length: 2 << 20}, &trickle{data: data, err: broke})
	if !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("err %v, want ErrInvalidRequest", err)
	}
	if b := got(); !bytes.Equal(b, data) {
		t.Fatalf("agent got %d bytes, want the %d read", len(b), len(data))
	}
}

// A digest known only at the body's end goes to the agent as the trailer of a chunked body, a MiB a
// chunk; one the caller cannot give (a malformed trailer of its own client) ends the body unfinished,
// so the agent never takes it as whole, and the error is the request's.
func TestPutFileSendsTheDigestAsATrailer(t *testing.T) {
	type seen struct {
		te, trailer string
		n           int
		err         error
	}
	seenc := make(chan seen, 4)
	sock := serveUnix(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		seenc <- seen{te: strings.Join(r.TransferEncoding, ","), trailer: r.Trailer.Get(protocol.HeaderDigest), n: len(body), err: err}
		sum := sha256.Sum256(body)
		json.NewEncoder(w).Encode(protocol.FileWritten{Path: "f", Size: int64(len(body)), Digest: hex.EncodeToString(sum[:])})
	})})
	var mu sync.Mutex
	var writes []int
	c := recordingClient(t, sock, &mu, &writes)

	data := bytes.Repeat([]byte("0123456789abcdef"), (3<<20+5000)/16)
	sum := sha256.Sum256(data)
	fw, err := c.PutFile(bounded(t), sandbox.FilePut{Path: "f", Length: -1, TrailerDigest: func() ([]byte, error) { return sum[:], nil }},
		&trickle{data: data, err: io.EOF})
	if err != nil || !bytes.Equal(fw.Digest, sum[:]) {
		t.Fatalf("%+v %v", fw, err)
	}
	if s := <-seenc; s.err != nil || s.n != len(data) || s.trailer != hex.EncodeToString(sum[:]) || s.te != "chunked" {
		t.Fatalf("the agent saw %+v", s)
	}
	mu.Lock()
	n := len(writes)
	mu.Unlock()
	if n > 20 { // a few a MiB chunk; 32 KiB chunks would be a hundred
		t.Fatalf("%d writes to the agent for 3 MiB: %v", n, writes)
	}

	bad := fmt.Errorf("the trailer is no digest: %w", sandbox.ErrInvalidRequest)
	_, err = c.PutFile(bounded(t), sandbox.FilePut{Path: "f", Length: -1, TrailerDigest: func() ([]byte, error) { return nil, bad }},
		&trickle{data: data, err: io.EOF})
	if !errors.Is(err, sandbox.ErrInvalidRequest) || !strings.Contains(err.Error(), "the trailer is no digest") {
		t.Fatalf("a trailer that fails: %v", err)
	}
	if s := <-seenc; s.err == nil {
		t.Fatalf("the agent took a body whose trailer failed as whole: %+v", s)
	}
}

// A streamed call's connection to the agent has a send buffer of 4 MiB (8 as the kernel counts it),
// past net.core.wmem_max for a daemon that may (root); up to wmem_max otherwise.
func TestStreamSendBuffer(t *testing.T) {
	sock := serveUnix(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		sum := sha256.Sum256(body)
		json.NewEncoder(w).Encode(protocol.FileWritten{Path: "f", Size: int64(len(body)), Digest: hex.EncodeToString(sum[:])})
	})})
	conns := make(chan *net.UnixConn, 4)
	var d net.Dialer
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) {
		conn, err := d.DialContext(ctx, "unix", sock)
		if err == nil {
			conns <- conn.(*net.UnixConn)
		}
		return conn, err
	})
	t.Cleanup(func() { c.Close() })
	data := []byte("some bytes")
	if _, err := c.PutFile(bounded(t), sandbox.FilePut{Path: "f", Length: int64(len(data))}, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	raw, err := (<-conns).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	raw.Control(func(fd uintptr) { got, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF) })
	if err != nil {
		t.Fatal(err)
	}
	want := 8 << 20
	if os.Geteuid() != 0 {
		max, err := os.ReadFile("/proc/sys/net/core/wmem_max")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(max)))
		want = 2 * min(n, 4<<20)
	}
	if got < want {
		t.Fatalf("the stream's send buffer is %d bytes, want %d", got, want)
	}
}
