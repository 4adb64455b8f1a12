package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// GrowthStep is the cost of the daemon with Live live sandboxes.
type GrowthStep struct {
	Live         int          `json:"live"`
	Provider     string       `json:"provider"`
	Create       Result       `json:"create"`       // the creates that brought the count up to Live
	List         Result       `json:"list"`         // GET /v1/sandboxes with Live sandboxes
	DaemonRSSKiB int64        `json:"daemonRssKiB"` // 0 when the daemon's pid is unknown
	PerSandboxKB float64      `json:"daemonKiBPerSandbox"`
	IdleCPU      *float64     `json:"idleCpuMsPerS,omitempty"` // the daemon's CPU while idle, ms a second, with --idle-window; counted in clock ticks (10 ms)
	Agents       *AgentMemory `json:"agents,omitempty"`
	StateKiB     int64        `json:"stateKiB,omitempty"` // provider state on disk, all sandboxes
}

// daemonInfo says where the daemon's process and provider state are, when known.
type daemonInfo struct {
	pid      int
	provider string
	dataDir  string
}

// growth brings the daemon to each number of live sandboxes in turn, idle, and measures create and list
// latency and memory there, and with idle > 0 the daemon's CPU over that long. Every sandbox it made
// is terminated at the end.
func growth(ctx context.Context, c *client, d daemonInfo, steps []int, b Bounds, idle time.Duration, prefix string) ([]GrowthStep, error) {
	var live []sandboxDoc
	defer func() {
		if err := terminateAll(context.WithoutCancel(ctx), c, live); err != nil {
			fmt.Fprintln(os.Stderr, "sbxbench: terminating growth sandboxes:", err)
		}
	}()
	base := int64(0)
	if d.pid > 0 {
		base = rssKiB(d.pid)
	}
	var out []GrowthStep
	for _, n := range steps {
		var lat []time.Duration
		start := time.Now()
		for len(live) < n {
			t := time.Now()
			sb, err := c.create(ctx, fmt.Sprintf("%s-grow-%d", prefix, len(live)))
			if err != nil {
				return out, fmt.Errorf("growth to %d: %w", n, err)
			}
			lat = append(lat, time.Since(t))
			live = append(live, sb)
		}
		st := GrowthStep{Live: n, Provider: d.provider, Create: summarize("create", lat, time.Since(start))}
		list, err := sequential(ctx, "list", Bounds{Count: min(b.Count, 100), Duration: b.Duration}, func(int) error {
			got, err := c.list(ctx)
			if err == nil && got < n {
				err = fmt.Errorf("listed %d sandboxes, %d are live", got, n)
			}
			return err
		})
		if err != nil {
			return out, err
		}
		st.List = list
		if d.pid > 0 {
			st.DaemonRSSKiB = rssKiB(d.pid)
			st.PerSandboxKB = float64(st.DaemonRSSKiB-base) / float64(n)
			if idle > 0 {
				used, err := idleCPU(ctx, d.pid, idle)
				if err != nil {
					return out, err
				}
				perS := float64(used.Microseconds()) / 1000 / idle.Seconds()
				st.IdleCPU = &perS
			}
		}
		if d.provider == "oci" {
			am := agentMemory()
			st.Agents = &am
			if d.dataDir != "" {
				st.StateKiB = diskKiB(filepath.Join(d.dataDir, "oci"))
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// terminateAll terminates sandboxes from a few clients at once.
func terminateAll(ctx context.Context, c *client, sbs []sandboxDoc) error {
	work := make(chan sandboxDoc)
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sb := range work {
				if err := c.terminate(ctx, sb); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, sb := range sbs {
		work <- sb
	}
	close(work)
	wg.Wait()
	return first
}
