package main

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Result is one measured case: latency percentiles in milliseconds and throughput in operations per
// second of wall time.
type Result struct {
	Name       string  `json:"name"`
	N          int     `json:"n"`
	P50        float64 `json:"p50Ms"`
	P90        float64 `json:"p90Ms"`
	P99        float64 `json:"p99Ms"`
	Mean       float64 `json:"meanMs"`
	Throughput float64 `json:"perSecond"`
	Note       string  `json:"note,omitempty"`
}

// summarize turns samples into a Result. wall is the time the samples took together.
func summarize(name string, d []time.Duration, wall time.Duration) Result {
	r := Result{Name: name, N: len(d)}
	if len(d) == 0 {
		return r
	}
	s := slices.Clone(d)
	slices.Sort(s)
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	q := func(p float64) float64 { return ms(s[int(p*float64(len(s)-1)+0.5)]) }
	r.P50, r.P90, r.P99 = q(0.50), q(0.90), q(0.99)
	r.Mean = ms(sum / time.Duration(len(s)))
	if wall > 0 {
		r.Throughput = float64(len(s)) / wall.Seconds()
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// Bounds limit every case: at most Count samples, and no new sample once Duration has passed (at least
// one is always taken).
type Bounds struct {
	Count    int
	Duration time.Duration
}

// sequential times op until the bounds say stop. op's error ends the case.
func sequential(ctx context.Context, name string, b Bounds, op func(i int) error) (Result, error) {
	return sequentialThen(ctx, name, b, op, nil)
}

// sequentialThen is sequential with an untimed after(i), when not nil, run after each timed op(i).
func sequentialThen(ctx context.Context, name string, b Bounds, op, after func(i int) error) (Result, error) {
	d := make([]time.Duration, 0, b.Count)
	start := time.Now()
	for i := 0; i < b.Count && (i == 0 || time.Since(start) < b.Duration); i++ {
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		t := time.Now()
		if err := op(i); err != nil {
			return Result{}, err
		}
		d = append(d, time.Since(t))
		if after != nil {
			if err := after(i); err != nil {
				return Result{}, err
			}
		}
	}
	return summarize(name, d, time.Since(start)), nil
}

// concurrent times op from n goroutines until the bounds say stop; Count bounds the samples of all of
// them together.
func concurrent(ctx context.Context, name string, n int, b Bounds, op func() error) (Result, error) {
	return runClients(ctx, name, n, b, func(_ int, deadline time.Time, s *shared) {
		for ctx.Err() == nil && time.Now().Before(deadline) && s.more() {
			t := time.Now()
			err := op()
			s.record(time.Since(t), err)
		}
	})
}

// paced is concurrent with an open loop: n goroutines together offer rate operations per second, each
// on its own fixed schedule, and each latency is measured from the time the operation was due, not from
// when it was sent, so a server that falls behind is charged for the queue it builds (no coordinated
// omission). It stops when the bounds say so; Count bounds the samples of all of them together.
//
// One pacer hands each client its due times, sleeping on a thread of its own with the kernel's timer
// precision (see preciseSleeper): a goroutine's own time.Sleep wakes up to a millisecond late when the
// process is otherwise idle (the runtime's poller waits in whole milliseconds), which an open loop
// would count as the server's latency. The pacer's own lateness is what paced measures with an op
// that does nothing (the floor "open-loop schedule").
func paced(ctx context.Context, name string, n int, rate float64, b Bounds, op func() error) (Result, error) {
	interval := time.Duration(float64(n) / rate * float64(time.Second))
	start := time.Now()
	dues := make([]chan time.Time, n)
	for g := range dues {
		// Room for every due time of the run: the pacer never waits for a client that fell behind.
		dues[g] = make(chan time.Time, int(b.Duration/interval)+2)
	}
	done := make(chan struct{})
	paced := make(chan struct{})
	go func() {
		defer close(paced)
		pace(ctx, done, start, start.Add(b.Duration), interval, dues)
	}()
	r, err := runClients(ctx, name, n, b, func(g int, _ time.Time, s *shared) {
		for due := range dues[g] {
			if ctx.Err() != nil || !s.more() {
				return
			}
			err := op()
			s.record(time.Since(due), err)
		}
	})
	close(done)
	<-paced
	return r, err
}

// pace sends client g's due times, start + interval*g/n + k*interval, to dues[g] as each comes, in
// order over all clients, until deadline, ctx or done; then it closes every channel.
func pace(ctx context.Context, done <-chan struct{}, start, deadline time.Time, interval time.Duration, dues []chan time.Time) {
	defer func() {
		for _, c := range dues {
			close(c)
		}
	}()
	sleepUntil := preciseSleeper()
	n := len(dues)
	for k := 0; ; k++ {
		due := start.Add(interval * time.Duration(k) / time.Duration(n))
		if !due.Before(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		default:
		}
		sleepUntil(due)
		dues[k%n] <- due
	}
}

// shared collects the samples of concurrent clients.
type shared struct {
	mu    sync.Mutex
	max   int
	taken int // samples granted by more, recorded or still running
	all   []time.Duration
	first error
}

// more reports whether another sample is wanted and, if so, reserves it for the caller, who must then
// record it: clients that ask at once cannot together take more than max samples.
func (s *shared) more() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.taken >= s.max || s.first != nil {
		return false
	}
	s.taken++
	return true
}

func (s *shared) record(d time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil && s.first == nil {
		s.first = err
	}
	s.all = append(s.all, d)
}

// runClients runs client(g, deadline, s) in n goroutines and summarizes what they recorded.
func runClients(ctx context.Context, name string, n int, b Bounds, client func(g int, deadline time.Time, s *shared)) (Result, error) {
	s := &shared{max: b.Count, all: make([]time.Duration, 0, b.Count)}
	start := time.Now()
	deadline := start.Add(b.Duration)
	var wg sync.WaitGroup
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client(g, deadline, s)
		}()
	}
	wg.Wait()
	if s.first != nil {
		return Result{}, s.first
	}
	return summarize(name, s.all, time.Since(start)), nil
}
