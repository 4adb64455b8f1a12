package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// oneMiBCommand prints exactly 1 MiB of printable text, the default output cap.
var oneMiBCommand = []string{"sh", "-c", "yes 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ | head -c 1048576"}

// getRate is the rate the open-loop GET case offers, about a quarter of what the closed loop reaches
// on 2 cores here.
const getRate = 4000.0

// getBounds are the bounds of the GET cases: many more samples than a sequential case takes.
func getBounds(b Bounds) Bounds { return Bounds{Count: max(b.Count*20, 2000), Duration: b.Duration} }

// execBlock is the number of back-to-back execs, and then of fork/exec floor samples, in one block.
const execBlock = 20

// apiCases measures every API case. With fl, the create and exec floors are sampled beside the cases
// they are compared with, one floor sample after each case sample.
func apiCases(ctx context.Context, c *client, b Bounds, prefix string, fl *floors) ([]Result, error) {
	var out []Result
	add := func(r Result, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", r.Name, err)
		}
		out = append(out, r)
		return nil
	}

	// create-to-ready: each sandbox made is terminated, untimed, and gone before the next create, as
	// the runc floor releases each container before the next run.
	var made sandboxDoc
	start := time.Now()
	r, err := sequentialThen(ctx, "create-to-ready", b, func(i int) (err error) {
		made, err = c.create(ctx, fmt.Sprintf("%s-ctr-%d", prefix, i))
		return err
	}, func(int) error {
		if err := c.terminateAndWait(ctx, made); err != nil {
			return err
		}
		if fl == nil {
			return nil
		}
		return fl.sampleCreate(ctx)
	})
	if fl != nil {
		fl.createWall = time.Since(start)
	}
	r.Name = "create-to-ready"
	r.Note = "POST /v1/sandboxes until state ready, cold"
	if err := add(r, err); err != nil {
		return out, err
	}

	sb, err := c.create(ctx, prefix+"-work")
	if err != nil {
		return out, err
	}
	defer c.terminate(context.WithoutCancel(ctx), sb)

	start = time.Now()
	r, err = sequentialThen(ctx, "exec true", b, func(int) error {
		_, err := c.exec(ctx, sb, "true")
		return err
	}, func(int) error {
		if fl == nil {
			return nil
		}
		if err := fl.sampleForkExec(ctx); err != nil {
			return err
		}
		return fl.sampleExec(ctx)
	})
	if fl != nil {
		fl.execWall = time.Since(start)
	}
	r.Name, r.Note = "exec true", "POST commands, argv [true]"
	if err := add(r, err); err != nil {
		return out, err
	}

	// The same back to back, as a client issuing commands one after another finds the daemon and the
	// agent: blocks of execs, each followed by as many samples of the fork/exec floor, so that both run
	// warm. Above, every sample meets processes that slept through the floors' samples.
	block := min(execBlock, b.Count)
	start = time.Now()
	r, err = sequentialThen(ctx, "exec true, back to back", b, func(int) error {
		_, err := c.exec(ctx, sb, "true")
		return err
	}, func(i int) error {
		if fl == nil || (i+1)%block != 0 {
			return nil
		}
		for range block {
			if err := fl.sampleForkExecWarm(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	if fl != nil {
		fl.warmWall = time.Since(start)
	}
	r.Name, r.Note = "exec true, back to back", fmt.Sprintf("the same in blocks of %d, each followed by as many fork/exec floor samples", block)
	if err := add(r, err); err != nil {
		return out, err
	}

	steps := []struct {
		name, note string
		op         func(i int) error
	}{
		{"exec 1 MiB output", "POST commands, 1 MiB of stdout", func(int) error {
			res, err := c.exec(ctx, sb, oneMiBCommand...)
			if err == nil && len(res.Stdout) != 1<<20 {
				err = fmt.Errorf("got %d bytes of output", len(res.Stdout))
			}
			return err
		}},
	}
	for _, size := range []int{4 << 10, 1 << 20} {
		data := bytes.Repeat([]byte("sandboxd"), size/8)
		label := sizeLabel(size)
		path := "bench-" + label + ".bin"
		steps = append(steps,
			struct {
				name, note string
				op         func(i int) error
			}{"file write " + label, "PUT files/content", func(int) error { return c.writeFile(ctx, sb, path, data) }},
			struct {
				name, note string
				op         func(i int) error
			}{"file read " + label, "GET files/content", func(int) error {
				got, err := c.readFile(ctx, sb, path)
				if err == nil && len(got) != size {
					err = fmt.Errorf("read %d bytes, wrote %d", len(got), size)
				}
				return err
			}})
	}
	for _, s := range steps {
		r, err := sequential(ctx, s.name, b, s.op)
		r.Name, r.Note = s.name, s.note
		if err := add(r, err); err != nil {
			return out, err
		}
	}

	r, err = concurrent(ctx, "get 64 clients", 64, getBounds(b), func() error {
		_, err := c.get(ctx, sb.ID)
		return err
	})
	r.Name, r.Note = "get, 64 clients", "GET /v1/sandboxes/{id}, 64 concurrent clients, closed loop: p50 ≈ 64 / throughput"
	if err := add(r, err); err != nil {
		return out, err
	}
	r, err = paced(ctx, "get 64 clients paced", 64, getRate, getBounds(b), func() error {
		_, err := c.get(ctx, sb.ID)
		return err
	})
	r.Name = fmt.Sprintf("get, 64 clients at %.0f/s", getRate)
	r.Note = "the same, open loop: 64 clients offer this rate together, latency counted from when each request was due"
	if err := add(r, err); err != nil {
		return out, err
	}

	for _, n := range []int{1, 100} {
		r, err := eventDelivery(ctx, c, sb, n, b)
		r.Name = fmt.Sprintf("event delivery, %d subscriber(s)", n)
		r.Note = "from sending a file write to its event on every SSE stream"
		if err := add(r, err); err != nil {
			return out, err
		}
	}
	return out, nil
}

func sizeLabel(n int) string {
	if n >= 1<<20 {
		return strconv.Itoa(n>>20) + " MiB"
	}
	return strconv.Itoa(n>>10) + " KiB"
}

// receipt is one subscriber seeing the event of one sample.
type receipt struct {
	path string
	at   time.Time
}

// eventDelivery opens n SSE streams on the sandbox's events, then writes a small file per sample and
// times, for every stream, from sending the write to reading its file_written event.
func eventDelivery(ctx context.Context, c *client, sb sandboxDoc, n int, b Bounds) (Result, error) {
	after, err := c.lastCursor(ctx, sb.ID)
	if err != nil {
		return Result{}, err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan receipt, 4*n)
	ready := make(chan error, n)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	q := url.Values{"after": {strconv.FormatInt(after, 10)}, "sandboxId": {sb.ID}}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			subscribe(sctx, c, "/v1/events/stream?"+q.Encode(), ready, got)
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-ready; err != nil {
			return Result{}, err
		}
	}
	count := min(b.Count, 100)
	var d []time.Duration
	start := time.Now()
	for i := 0; i < count && (i == 0 || time.Since(start) < b.Duration); i++ {
		path := fmt.Sprintf("ev-%d-%d.txt", n, i)
		t0 := time.Now()
		if err := c.writeFile(ctx, sb, path, []byte("x")); err != nil {
			return Result{}, err
		}
		timeout := time.After(10 * time.Second)
		for seen := 0; seen < n; {
			select {
			case rc := <-got:
				if rc.path == path {
					d = append(d, rc.at.Sub(t0))
					seen++
				}
			case <-timeout:
				return Result{}, fmt.Errorf("%d of %d subscribers saw the event of %s within 10s", seen, n, path)
			}
		}
	}
	return summarize("", d, time.Since(start)), nil
}

// subscribe reads one event stream and reports the path of every file_written event it carries.
func subscribe(ctx context.Context, c *client, path string, ready chan<- error, got chan<- receipt) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		ready <- err
		return
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		ready <- err
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		ready <- fmt.Errorf("event stream: status %d", resp.StatusCode)
		return
	}
	br := bufio.NewReader(resp.Body)
	first := true
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if first {
				ready <- err
			}
			return
		}
		if first { // the stream's opening comment: it is established
			first = false
			ready <- nil
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type string `json:"type"`
			Data struct {
				Path string `json:"path"`
			} `json:"data"`
		}
		if json.Unmarshal([]byte(data), &ev) != nil || ev.Type != "sandbox.file_written" {
			continue
		}
		select {
		case got <- receipt{path: ev.Data.Path, at: time.Now()}:
		case <-ctx.Done():
			return
		}
	}
}

// warmCreate times create-to-ready on a daemon keeping n containers warm (its pool directory is
// poolDir). Between samples, untimed, it terminates the sandbox and waits until the pool is full again
// and every entry's agent answers, so that each sample finds the pool as a steady trickle of creates
// would; a sample that still finds it empty starts a container of its own, and counts. Sandboxes are
// created with resources (nil: none).
func warmCreate(ctx context.Context, c *client, poolDir string, n int, resources map[string]any, b Bounds, prefix string) (Result, error) {
	refilled := func() error { return poolFull(ctx, poolDir, n, time.Minute) }
	if err := refilled(); err != nil {
		return Result{}, err
	}
	var made sandboxDoc
	r, err := sequentialThen(ctx, "", b, func(i int) (err error) {
		made, err = c.createWith(ctx, fmt.Sprintf("%s-warm-%d", prefix, i), resources)
		return err
	}, func(int) error {
		if err := c.terminateAndWait(ctx, made); err != nil {
			return err
		}
		return refilled()
	})
	r.Name = fmt.Sprintf("create-to-ready, warm pool of %d", n)
	r.Note = "the same on a daemon run with --oci-warm-pool: a started container is taken"
	if resources != nil {
		r.Name += ", limits"
		r.Note = "the same with memory and CPU limits, which the taken container's cgroups are given"
	}
	return r, err
}

// poolFull waits, up to within, until the warm pool in poolDir holds n entries whose agents answer.
func poolFull(ctx context.Context, poolDir string, n int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ents, err := os.ReadDir(poolDir)
		if err != nil {
			return err
		}
		ready := 0
		for _, e := range ents {
			if waitAgent(ctx, filepath.Join(poolDir, e.Name(), "run", "agent.sock"), -1) == nil {
				ready++
			}
		}
		if ready >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the warm pool holds %d answering entries after %s, want %d", ready, within, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// burstCreate has clients concurrent callers create n sandboxes in all, each until ready, on a daemon
// keeping a warm pool of n (its pool directory is poolDir), full when the burst starts: the creates
// per second a caller sees from a pool sized for its burst, and each create's latency. The sandboxes
// are terminated afterwards, untimed.
func burstCreate(ctx context.Context, c *client, poolDir string, n, clients int, prefix string) (Result, error) {
	if err := poolFull(ctx, poolDir, n, time.Duration(n)*time.Second+time.Minute); err != nil {
		return Result{}, err
	}
	var mu sync.Mutex
	var lat []time.Duration
	var made []sandboxDoc
	var firstErr error
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for i := range next {
				t0 := time.Now()
				sb, err := c.create(ctx, fmt.Sprintf("%s-burst-%d", prefix, i))
				d := time.Since(t0)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if err == nil {
					lat, made = append(lat, d), append(made, sb)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	for _, sb := range made {
		if err := c.terminate(context.WithoutCancel(ctx), sb); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	r := summarize(fmt.Sprintf("create-to-ready, %d clients, burst of %d", clients, n), lat, wall)
	r.Note = fmt.Sprintf("creates per second over the burst, from a warm pool of %d", n)
	return r, firstErr
}
