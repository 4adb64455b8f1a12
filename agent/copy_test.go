package agent

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// pieces hands out data in reads of at most size bytes, then fails with err (io.EOF: ends).
type pieces struct {
	data []byte
	size int
	err  error
}

func (p *pieces) Read(b []byte) (int, error) {
	if len(p.data) == 0 {
		return 0, p.err
	}
	n := copy(b[:min(len(b), p.size)], p.data)
	p.data = p.data[n:]
	return n, nil
}

// zeros never ends.
type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

func onOneP(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
}

// Copies large enough to take a second P, side by side: each file gets its bytes in order, each hash
// is of them, and the agent is back on one P after the last.
func TestCopyHashedInOrderAndNarrowsAfter(t *testing.T) {
	onOneP(t)
	dir := t.TempDir()
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			data := make([]byte, wideAfter+3<<20+12345)
			for j := range data {
				data[j] = byte(j*7 + j/4093 + i)
			}
			file, err := os.Create(filepath.Join(dir, string(rune('a'+i))))
			if err != nil {
				t.Error(err)
				return
			}
			defer file.Close()
			h := sha256.New()
			n, err := copyHashed(file, h, &pieces{data: data, size: 32<<10 + i*1000, err: io.EOF})
			got, _ := os.ReadFile(file.Name())
			want := sha256.Sum256(data)
			if err != nil || n != int64(len(data)) || !bytes.Equal(got, data) || !bytes.Equal(h.Sum(nil), want[:]) {
				t.Errorf("copy %d: %d bytes, err %v; file of %d bytes, equal %v, hash equal %v", i, n, err, len(got), bytes.Equal(got, data), bytes.Equal(h.Sum(nil), want[:]))
			}
		})
	}
	wg.Wait()
	if p := runtime.GOMAXPROCS(0); p != 1 {
		t.Fatalf("GOMAXPROCS %d after the copies, want 1", p)
	}
}

// A body that breaks off is a bodyError, with everything before it in the file; a file that cannot
// be written ends the copy with the write's error, however much body is left.
func TestCopyHashedFailures(t *testing.T) {
	onOneP(t)
	dir := t.TempDir()
	file, err := os.Create(filepath.Join(dir, "broken"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	data := bytes.Repeat([]byte("y"), wideAfter+1<<19)
	broke := errors.New("the daemon went away")
	n, err := copyHashed(file, sha256.New(), &pieces{data: data, size: 64 << 10, err: broke})
	var be bodyError
	got, _ := os.ReadFile(file.Name())
	if !errors.As(err, &be) || !errors.Is(err, broke) || n != int64(len(data)) || !bytes.Equal(got, data) {
		t.Fatalf("broken body: %d bytes, err %v, file of %d bytes", n, err, len(got))
	}

	ro, err := os.Open(file.Name()) // read-only: every write fails
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	n, err = copyHashed(ro, sha256.New(), zeros{})
	if err == nil || errors.As(err, &be) || n > 64<<20 {
		t.Fatalf("unwritable file: %d bytes, err %v", n, err)
	}
	if p := runtime.GOMAXPROCS(0); p != 1 {
		t.Fatalf("GOMAXPROCS %d after the copies, want 1", p)
	}
}
