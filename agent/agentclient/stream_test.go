package agentclient_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
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
	var d net.Dialer
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) {
		conn, err := d.DialContext(ctx, "unix", sock)
		if err != nil {
			return nil, err
		}
		return recordedConn{conn, &mu, &writes}, nil
	})
	t.Cleanup(func() { c.Close() })
	return c, func() []byte { <-done; mu.Lock(); defer mu.Unlock(); return got }, func() []int { mu.Lock(); defer mu.Unlock(); return append([]int(nil), writes...) }
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
