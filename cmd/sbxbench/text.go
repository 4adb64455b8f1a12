package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// printText writes the report as tables for people.
func printText(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "sbxbench %s on %s (%d CPUs), provider %s\n\n", rep.When.Format("2006-01-02 15:04:05Z"), rep.Host, rep.CPUs, rep.Provider)
	if len(rep.Cases)+len(rep.Floors) > 0 {
		fmt.Fprintf(w, "%-38s %6s %9s %9s %9s %9s %9s  %s\n", "case", "n", "p50 ms", "p90 ms", "p99 ms", "mean ms", "ops/s", "note")
	}
	for _, group := range [][]Result{rep.Cases, rep.Floors} {
		for _, r := range group {
			fmt.Fprintf(w, "%-38s %6d %9.3f %9.3f %9.3f %9.3f %9.1f  %s\n", r.Name, r.N, r.P50, r.P90, r.P99, r.Mean, r.Throughput, r.Note)
		}
	}
	if len(rep.Ratios) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ratio (p50 / p50)\t\t")
		for _, r := range rep.Ratios {
			fmt.Fprintf(tw, "%s / %s\t%.2fx\t\n", r.Case, r.Floor, r.P50)
		}
		tw.Flush()
	}
	printSpreads(w, "ratio over %d rounds (p50 / p50 in each)", rep.Rounds, func(r Spread) string { return r.Case + " / " + r.Floor }, "%.2fx")
	printSpreads(w, "p50 ms over %d rounds", rep.RoundP50, func(r Spread) string { return r.Case }, "%.3f")
	if len(rep.Growth) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "live\tprovider\tcreate p50 ms\tcreate p90 ms\tlist p50 ms\tlist p99 ms\tdaemon RSS MiB\tdaemon KiB/sandbox\tidle CPU ms/s\tagents\tagent RSS KiB each\tagent PSS KiB each\tcgroup KiB each\tstate KiB each\t")
		for _, g := range rep.Growth {
			agents, rss, pss, cg, state, idle := "-", "-", "-", "-", "-", "-"
			if g.IdleCPU != nil {
				idle = fmt.Sprintf("%.1f", *g.IdleCPU)
			}
			if a := g.Agents; a != nil && a.Count > 0 {
				agents = fmt.Sprint(a.Count)
				rss = fmt.Sprint(a.RSSKiB / int64(a.Count))
				pss = fmt.Sprint(a.PSSKiB / int64(a.Count))
				if a.Cgroups > 0 {
					cg = fmt.Sprint(a.CgroupKiB / int64(a.Cgroups))
				}
				state = fmt.Sprint(g.StateKiB / int64(g.Live))
			}
			fmt.Fprintf(tw, "%d\t%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.1f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t\n", g.Live, g.Provider,
				g.Create.P50, g.Create.P90, g.List.P50, g.List.P99, float64(g.DaemonRSSKiB)/1024, g.PerSandboxKB, idle, agents, rss, pss, cg, state)
		}
		tw.Flush()
	}
	if len(rep.Compared) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "paired case\tn\tcandidate p50 ms\tp90 ms\tbaseline p50 ms\tp90 ms\tp50 ratio\tcandidate faster in\t")
		for _, p := range rep.Compared {
			fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3fx\t%.0f%%\t\n", p.Case, p.Candidate.N,
				p.Candidate.P50, p.Candidate.P90, p.Baseline.P50, p.Baseline.P90, p.P50Ratio, 100*p.Faster)
		}
		tw.Flush()
	}
	for _, n := range rep.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

// printSpreads writes one table of values over rounds: the median, least and greatest in format, then
// each round's value in format without its "x".
func printSpreads(w io.Writer, title string, rs []Spread, name func(Spread) string, format string) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, title+"\tmedian\tmin\tmax\teach round\t\n", len(rs[0].Rounds))
	for _, r := range rs {
		each := make([]string, len(r.Rounds))
		for i, v := range r.Rounds {
			each[i] = fmt.Sprintf(strings.TrimSuffix(format, "x"), v)
		}
		fmt.Fprintf(tw, "%s\t"+format+"\t"+format+"\t"+format+"\t%s\t\n", name(r), r.Median, r.Min, r.Max, strings.Join(each, " "))
	}
	tw.Flush()
}
