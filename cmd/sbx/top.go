package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
)

func (a *app) statsCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "stats ID",
		Short:             "Show what a sandbox uses now (CPU time, memory, processes, disk, network)",
		Example:           `  sbx stats sbx_abc` + "\n" + `  sbx stats sbx_abc -o json`,
		Args:              exactArgs(1, "a sandbox id"),
		ValidArgsFunction: a.completeIDs,
		RunE: func(_ *cobra.Command, args []string) error {
			st, err := a.c.Stats(a.ctx, sandbox.ID(args[0]))
			if err != nil {
				return err
			}
			if a.json() {
				return a.writeJSON(st)
			}
			t := a.table()
			t.row("id:", string(st.SandboxID))
			t.row("generation:", fmt.Sprint(st.Generation))
			t.row("state:", a.state(st.State))
			t.row("cpu time:", seconds(st.CPUSeconds))
			t.row("memory:", bytesOf(st.MemoryBytes)+" of "+bytesOf(st.MemoryLimitBytes)+", peak "+bytesOf(st.MemoryPeakBytes))
			t.row("processes:", count(st.Pids)+" of "+count(st.PidsLimit))
			t.row("disk:", bytesOf(st.DiskBytes)+" of "+bytesOf(st.DiskLimitBytes))
			if st.NetworkRxBytes != nil || st.NetworkTxBytes != nil {
				t.row("network:", "in "+bytesOf(st.NetworkRxBytes)+", out "+bytesOf(st.NetworkTxBytes))
			}
			return t.flush()
		},
	}
}

func (a *app) topCmd() *cobra.Command {
	var (
		interval time.Duration
		rounds   int
	)
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Show what every live sandbox uses, refreshed until interrupted",
		Long: `top lists every ready or paused sandbox with its CPU use (over the last interval),
memory, processes, disk and network bytes in and out, refreshed every --interval. On a terminal the screen is
redrawn; otherwise each round is printed below the last. A figure the provider cannot
read is shown as "-". -n stops after that many rounds; -o json prints one JSON line
per sandbox and round.`,
		Example: `  sbx top` + "\n" + `  sbx top -n 1` + "\n" + `  sbx top --interval 5s -o json`,
		Args:    exactArgs(0, "no arguments"),
		RunE: func(*cobra.Command, []string) error {
			if interval < 100*time.Millisecond {
				return usagef("--interval %s: want at least 100ms", interval)
			}
			prev := map[sandbox.ID]sample{}
			for round := 0; rounds <= 0 || round < rounds; round++ {
				if round > 0 {
					select {
					case <-a.ctx.Done():
						return nil
					case <-time.After(interval):
					}
				}
				next, err := a.topRound(prev)
				if err != nil {
					return err
				}
				prev = next
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "time between rounds")
	cmd.Flags().IntVarP(&rounds, "rounds", "n", 0, "stop after this many rounds (0: until interrupted)")
	return cmd
}

// sample is one sandbox's CPU time at a moment, for the CPU use over the next interval.
type sample struct {
	cpu *float64
	at  time.Time
}

// topRound prints one round of top and returns its samples.
func (a *app) topRound(prev map[sandbox.ID]sample) (map[sandbox.ID]sample, error) {
	list, err := a.c.List(a.ctx)
	if err != nil {
		return nil, err
	}
	next := map[sandbox.ID]sample{}
	var rows [][]string
	for _, sb := range list {
		if sb.State != sandbox.StateReady && sb.State != sandbox.StatePaused {
			continue
		}
		st, err := a.c.Stats(a.ctx, sb.ID)
		switch {
		case errors.Is(err, sandbox.ErrUnsupportedCapability), errors.Is(err, sandbox.ErrInvalidState), errors.Is(err, sandbox.ErrNotFound):
			st = &api.SandboxStats{SandboxID: sb.ID, Generation: sb.Generation, State: sb.State, ObservedAt: time.Now()}
		case err != nil:
			return nil, err
		}
		next[sb.ID] = sample{cpu: st.CPUSeconds, at: st.ObservedAt}
		if a.json() {
			if err := a.jsonLine(st); err != nil {
				return nil, err
			}
			continue
		}
		cpu := "-"
		if p, ok := prev[sb.ID]; ok && p.cpu != nil && st.CPUSeconds != nil {
			if d := st.ObservedAt.Sub(p.at).Seconds(); d > 0 {
				cpu = fmt.Sprintf("%.1f%%", 100*(*st.CPUSeconds-*p.cpu)/d)
			}
		}
		rows = append(rows, []string{string(sb.ID), a.state(sb.State), cpu,
			bytesOf(st.MemoryBytes), bytesOf(st.MemoryLimitBytes), count(st.Pids), bytesOf(st.DiskBytes),
			bytesOf(st.NetworkRxBytes), bytesOf(st.NetworkTxBytes)})
	}
	if a.json() {
		return next, nil
	}
	if isTerminal(a.stdout) {
		fmt.Fprint(a.stdout, "\x1b[H\x1b[2J") // redraw from the top
	}
	t := a.table("id", "state", "cpu", "memory", "limit", "pids", "disk", "net-in", "net-out")
	for _, r := range rows {
		t.row(r...)
	}
	return next, t.flush()
}

func seconds(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fs", *v)
}

func count(v *int64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

// bytesOf prints a size in binary units, "-" when not known.
func bytesOf(v *int64) string {
	if v == nil {
		return "-"
	}
	n := float64(*v)
	for _, u := range []string{"B", "KiB", "MiB", "GiB"} {
		if n < 1024 || u == "GiB" {
			if u == "B" {
				return fmt.Sprintf("%d B", *v)
			}
			return fmt.Sprintf("%.1f %s", n, u)
		}
		n /= 1024
	}
	return ""
}
