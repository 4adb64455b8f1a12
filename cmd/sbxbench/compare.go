package main

import (
	"bytes"
	"context"
	"fmt"
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

// fourKiB and oneMiB are the contents of the paired file writes.
var (
	fourKiB = make([]byte, 4<<10)
	oneMiB  = bytes.Repeat([]byte("sandboxd"), 1<<17)
)

// side is one daemon of a comparison and the sandbox the bench keeps on it.
type side struct {
	c  *client
	sb sandboxDoc
}

// compare measures the paired cases on the candidate daemon a and the baseline daemon b: exec of true
// and of a command printing 1 MiB, a write and a read of 4 KiB and of 1 MiB, GET of one sandbox,
// create-to-ready.
func compare(ctx context.Context, a, b *client, bounds Bounds, prefix string) ([]Paired, error) {
	sides := [2]*side{{c: a}, {c: b}}
	for i, s := range sides {
		sb, err := s.c.create(ctx, fmt.Sprintf("%s-cmp-%d", prefix, i))
		if err != nil {
			return nil, err
		}
		s.sb = sb
		defer s.c.terminate(context.WithoutCancel(ctx), sb)
	}
	var out []Paired
	// readPaired reads the file the write case before it wrote.
	readPaired := func(path string, size int) func(s *side, _ int) (time.Duration, error) {
		return func(s *side, _ int) (time.Duration, error) {
			t := time.Now()
			got, err := s.c.readFile(ctx, s.sb, path)
			d := time.Since(t)
			if err == nil && len(got) != size {
				err = fmt.Errorf("read %d bytes of %s, wrote %d", len(got), path, size)
			}
			return d, err
		}
	}
	cases := []struct {
		name string
		op   func(s *side, i int) (time.Duration, error)
	}{
		{"exec true", func(s *side, _ int) (time.Duration, error) {
			t := time.Now()
			_, err := s.c.exec(ctx, s.sb, "true")
			return time.Since(t), err
		}},
		{"exec 1 MiB output", func(s *side, _ int) (time.Duration, error) {
			t := time.Now()
			res, err := s.c.exec(ctx, s.sb, oneMiBCommand...)
			if err == nil && len(res.Stdout) != 1<<20 {
				err = fmt.Errorf("got %d bytes of output", len(res.Stdout))
			}
			return time.Since(t), err
		}},
		{"file write 4 KiB", func(s *side, _ int) (time.Duration, error) {
			t := time.Now()
			err := s.c.writeFile(ctx, s.sb, "paired.bin", fourKiB)
			return time.Since(t), err
		}},
		{"file read 4 KiB", readPaired("paired.bin", len(fourKiB))},
		{"file write 1 MiB", func(s *side, _ int) (time.Duration, error) {
			t := time.Now()
			err := s.c.writeFile(ctx, s.sb, "paired-1MiB.bin", oneMiB)
			return time.Since(t), err
		}},
		{"file read 1 MiB", readPaired("paired-1MiB.bin", len(oneMiB))},
		{"get one sandbox", func(s *side, _ int) (time.Duration, error) {
			t := time.Now()
			_, err := s.c.get(ctx, s.sb.ID)
			return time.Since(t), err
		}},
		{"create-to-ready", func(s *side, i int) (time.Duration, error) {
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
		p, err := paired(ctx, k.name, bounds, func(which, i int) (time.Duration, error) { return k.op(sides[which], i) })
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
