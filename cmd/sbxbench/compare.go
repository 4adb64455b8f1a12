package main

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Paired is one case measured on two daemons in alternation: each sample of the candidate is taken
// next to one of the baseline, the order swapped every pair, so both see the same moments of a noisy
// machine. Differences of a few percent, lost in the spread between two runs, show up in one.
type Paired struct {
	Case      string `json:"case"`
	Candidate Result `json:"candidate"`
	Baseline  Result `json:"baseline"`
	// P50Ratio is the candidate's p50 over the baseline's: below 1 the candidate is faster.
	P50Ratio float64 `json:"p50Ratio"`
	// Faster is the share of pairs in which the candidate's sample was the shorter one: near 0.5 when
	// the two do not differ.
	Faster float64 `json:"candidateFasterShare"`
}

// The contents of the paired file writes and reads.
var (
	fourKiB = make([]byte, 4<<10)
	oneMiB  = bytes.Repeat([]byte("sandboxd"), 1<<20/8)
)

// side is one daemon of a comparison, the sandbox the bench keeps on it and the event streams open on
// that sandbox's events.
type side struct {
	c       *client
	sb      sandboxDoc
	events  chan receipt // what the streams of the event case read
	streams int
}

// compare measures the paired cases on the candidate daemon a and the baseline daemon b: exec of true
// and of a command printing 1 MiB, writes and reads of 4 KiB and 1 MiB, GET of one sandbox, the
// delivery of a file write's event to 1 and to 100 streams (until the last has read it), create-to-ready.
func compare(ctx context.Context, a, b *client, bounds Bounds, prefix string) ([]Paired, error) {
	sides := [2]*side{{c: a}, {c: b}}
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i, s := range sides {
		sb, err := s.c.create(ctx, fmt.Sprintf("%s-cmp-%d", prefix, i))
		if err != nil {
			return nil, err
		}
		s.sb = sb
		defer s.c.terminate(context.WithoutCancel(ctx), sb)
		for _, f := range []struct {
			path string
			data []byte
		}{{"paired-4k.bin", fourKiB}, {"paired-1m.bin", oneMiB}} {
			if err := s.c.writeFile(ctx, sb, f.path, f.data); err != nil {
				return nil, err
			}
		}
	}
	// n streams on each side, opened just before an event case, so that no earlier case's events wait
	// in them, and closed after it.
	var closeStreams context.CancelFunc = func() {}
	defer func() { closeStreams() }()
	openStreams := func(n int) func() error {
		return func() error {
			closeStreams()
			sctx, cancel := context.WithCancel(sctx)
			closeStreams = cancel
			for _, s := range sides {
				after, err := s.c.lastCursor(ctx, s.sb.ID)
				if err != nil {
					return err
				}
				ready := make(chan error, n)
				s.events, s.streams = make(chan receipt, 4*n), n
				q := url.Values{"after": {strconv.FormatInt(after, 10)}, "sandboxId": {s.sb.ID}}
				for range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						subscribe(sctx, s.c, "/v1/events/stream?"+q.Encode(), ready, s.events)
					}()
				}
				for range n {
					if err := <-ready; err != nil {
						return err
					}
				}
			}
			return nil
		}
	}
	// deliver writes a small file and times until every stream of the side has read its event.
	deliver := func(s *side, i int) (time.Duration, error) {
		path := fmt.Sprintf("paired-ev-%d-%d.txt", s.streams, i)
		t := time.Now()
		if err := s.c.writeFile(ctx, s.sb, path, []byte("x")); err != nil {
			return 0, err
		}
		var last time.Duration
		timeout := time.After(10 * time.Second)
		for seen := 0; seen < s.streams; {
			select {
			case rc := <-s.events:
				if rc.path == path {
					last = max(last, rc.at.Sub(t))
					seen++
				}
			case <-timeout:
				return 0, fmt.Errorf("%d of %d streams saw the event of %s within 10s", seen, s.streams, path)
			}
		}
		return last, nil
	}
	write := func(s *side, path string, data []byte) (time.Duration, error) {
		t := time.Now()
		err := s.c.writeFile(ctx, s.sb, path, data)
		return time.Since(t), err
	}
	read := func(s *side, path string, size int) (time.Duration, error) {
		t := time.Now()
		got, err := s.c.readFile(ctx, s.sb, path)
		d := time.Since(t)
		if err == nil && len(got) != size {
			err = fmt.Errorf("read %d bytes of %s, wrote %d", len(got), path, size)
		}
		return d, err
	}
	var out []Paired
	cases := []struct {
		name  string
		setup func() error
		op    func(s *side, i int) (time.Duration, error)
	}{
		{"exec true", nil, func(s *side, _ int) (time.Duration, error) {
			t := time.Now()
			_, err := s.c.exec(ctx, s.sb, "true")
			return time.Since(t), err
		}},
		{"exec 1 MiB output", nil, func(s *side, _ int) (time.Duration, error) {
			t := time.Now()
			res, err := s.c.exec(ctx, s.sb, oneMiBCommand...)
			if err == nil && len(res.Stdout) != 1<<20 {
				err = fmt.Errorf("got %d bytes of output", len(res.Stdout))
			}
			return time.Since(t), err
		}},
		{"file write 4 KiB", nil, func(s *side, _ int) (time.Duration, error) { return write(s, "paired-4k.bin", fourKiB) }},
		{"file write 1 MiB", nil, func(s *side, _ int) (time.Duration, error) { return write(s, "paired-1m.bin", oneMiB) }},
		{"file read 4 KiB", nil, func(s *side, _ int) (time.Duration, error) { return read(s, "paired-4k.bin", len(fourKiB)) }},
		{"file read 1 MiB", nil, func(s *side, _ int) (time.Duration, error) { return read(s, "paired-1m.bin", len(oneMiB)) }},
		{"get one sandbox", nil, func(s *side, _ int) (time.Duration, error) {
			t := time.Now()
			_, err := s.c.get(ctx, s.sb.ID)
			return time.Since(t), err
		}},
		{"event delivery, 1 stream", openStreams(1), deliver},
		{"event delivery, 100 streams (the last)", openStreams(100), deliver},
		{"create-to-ready", nil, func(s *side, i int) (time.Duration, error) {
			t := time.Now()
			sb, err := s.c.create(ctx, fmt.Sprintf("%s-cmp-ctr-%d", prefix, i)) // one key per daemon
			d := time.Since(t)
			if err != nil {
				return d, err
			}
			// Untimed, as in the create case: each sandbox is gone before the next create.
			return d, s.c.terminateAndWait(ctx, sb)
		}},
	}
	for _, k := range cases {
		if k.setup != nil {
			if err := k.setup(); err != nil {
				return out, fmt.Errorf("%s: %w", k.name, err)
			}
		}
		p, err := paired(ctx, k.name, bounds, func(which, i int) (time.Duration, error) { return k.op(sides[which], i) })
		closeStreams() // no case after an event case meets its streams
		if err != nil {
			return out, fmt.Errorf("%s: %w", k.name, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// paired takes samples of op on side 0 (the candidate) and side 1 (the baseline) in pairs, the
// candidate first in even pairs and second in odd ones, until the bounds say stop.
func paired(ctx context.Context, name string, b Bounds, op func(which, i int) (time.Duration, error)) (Paired, error) {
	var d [2][]time.Duration
	faster := 0
	start := time.Now()
	for i := 0; i < b.Count && (i == 0 || time.Since(start) < b.Duration); i++ {
		if err := ctx.Err(); err != nil {
			return Paired{}, err
		}
		var pair [2]time.Duration
		for k := range 2 {
			which := k ^ i&1
			t, err := op(which, i)
			if err != nil {
				return Paired{}, err
			}
			pair[which] = t
		}
		d[0], d[1] = append(d[0], pair[0]), append(d[1], pair[1])
		if pair[0] < pair[1] {
			faster++
		}
	}
	// No throughput: the wall time is shared by both sides.
	p := Paired{Case: name, Candidate: summarize(name, d[0], 0), Baseline: summarize(name, d[1], 0)}
	if p.Baseline.P50 > 0 {
		p.P50Ratio = p.Candidate.P50 / p.Baseline.P50
	}
	p.Faster = float64(faster) / float64(len(d[0]))
	return p, nil
}
