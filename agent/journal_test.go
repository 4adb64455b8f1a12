package agent

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// TestJournalRecent: a journal's newest bytes are in memory as well. Readers that keep up (served
// from memory), that fall behind by more than memory holds or start over from the beginning (served
// from the file), and readers of a journal whose file holds less than memory would, each get every
// byte once, in order, while appends of random sizes (some larger than memory) wrap the memory's
// ring and the file's; only bytes the file no longer keeps are skipped, and a reader learns it.
func TestJournalRecent(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int64
	}{
		{"the file keeps everything", 64 * recentBytes},
		{"the file wraps", 5 * recentBytes / 2},
		{"the file is smaller than memory", recentBytes / 3},
	} {
		t.Run(tc.name, func(t *testing.T) { testJournalRecent(t, tc.size) })
	}
}

func testJournalRecent(t *testing.T, size int64) {
	j, err := newJournal(t.TempDir(), size)
	if err != nil {
		t.Fatal(err)
	}
	defer j.release()
	rnd := rand.New(rand.NewPCG(3, uint64(size)))
	all := make([]byte, 12*recentBytes)
	for i := range all {
		all[i] = byte(rnd.Uint32())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// read reads from offset 0 to the end in reads of at most max, sleeping lag after each, and
	// checks each read against the output: it starts where the last ended, or later when the file
	// dropped those bytes.
	read := func(name string, max int, lag time.Duration) {
		var after int64
		for {
			start, data, _, done, err := j.read(ctx, after, max)
			if err != nil {
				t.Errorf("%s: read from %d: %v", name, after, err)
				return
			}
			if start < after || (start > after && size >= int64(len(all))) {
				t.Errorf("%s: read from %d starts at %d", name, after, start)
				return
			}
			if start+int64(len(data)) > int64(len(all)) || !bytes.Equal(data, all[start:start+int64(len(data))]) {
				t.Errorf("%s: %d bytes from %d are not the output's", name, len(data), start)
				return
			}
			after = start + int64(len(data))
			if done {
				if after != int64(len(all)) {
					t.Errorf("%s: done at %d of %d", name, after, len(all))
				}
				return
			}
			time.Sleep(lag)
		}
	}
	var wg sync.WaitGroup
	reader := func(name string, max int, lag time.Duration) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			read(name, max, lag)
		}()
	}
	reader("keeps up", recentBytes, 0)
	reader("small reads", 100, 0)
	reader("falls behind", recentBytes/2, 2*time.Millisecond)
	late := false
	for off := 0; off < len(all); {
		n := 1 + rnd.IntN(recentBytes/4)
		if rnd.IntN(6) == 0 {
			n = recentBytes + rnd.IntN(recentBytes) // more than memory holds
		}
		n = min(n, len(all)-off)
		j.append(all[off : off+n])
		off += n
		if !late && off >= len(all)/2 {
			late = true
			reader("starts late", 3*recentBytes, 0) // from offset 0, far behind memory
		}
		if rnd.IntN(4) == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	j.close()
	wg.Wait()
	read("after the end", recentBytes, 0) // memory is let go at the end: all from the file

	// At memory's edge: the oldest byte it holds comes from it, the one before from the file.
	edge, err := newJournal(t.TempDir(), size)
	if err != nil {
		t.Fatal(err)
	}
	defer edge.release()
	r := min(recentBytes, size)
	edge.append(all[:10])
	edge.append(all[10 : 10+r])
	for _, from := range []int64{9, 10, 11} {
		start, data, _, _, err := edge.read(ctx, from, 2*recentBytes)
		if err != nil || start != max(from, 10+r-size) || !bytes.Equal(data, all[start:10+r]) {
			t.Errorf("read from %d at memory's edge: %d bytes from %d, %v", from, len(data), start, err)
		}
	}
}
