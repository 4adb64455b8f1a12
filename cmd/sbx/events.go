package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
)

func (a *app) eventsCmd() *cobra.Command {
	var id string
	var after int64
	var follow bool
	var limit int
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Print the event log, one line per event",
		Long: `Print the events after a cursor, oldest first, one line per event (JSON lines with -o json).
With --follow, keep printing live events until interrupted; a dropped connection is
resumed where it stopped. A cursor older than the history kept fails with
event_history_unavailable.`,
		Example: `  sbx events
  sbx events --sandbox sbx_abc --follow
  sbx events --after 120 -o json | jq .type`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(*cobra.Command, []string) error {
			if after < 0 || limit < 0 {
				return usagef("--after and --limit are at least 0")
			}
			q := sandbox.EventQuery{After: after, SandboxID: sandbox.ID(id)}
			t := a.table()
			n := 0
			print := func(ev sandbox.Event) error {
				n++
				if a.json() {
					return a.jsonLine(ev)
				}
				t.row(strconv.FormatInt(ev.Cursor, 10), ev.Timestamp.Local().Format(time.RFC3339), string(ev.SandboxID),
					"g"+strconv.FormatInt(int64(ev.Generation), 10), string(ev.Type), a.eventDetail(ev))
				if follow {
					return t.flush() // line by line, so that each event shows as it comes
				}
				return nil
			}
			done := func() bool { return limit > 0 && n >= limit }
			if follow {
				for ev, err := range a.c.Stream(a.ctx, q) {
					if err != nil {
						return err
					}
					if err := print(ev); err != nil || done() {
						return err
					}
				}
				return a.ctx.Err()
			}
			for {
				page, err := a.c.Events(a.ctx, q)
				if err != nil {
					return err
				}
				for _, ev := range page {
					if err := print(ev); err != nil {
						return err
					}
					if done() {
						return t.flush()
					}
				}
				if len(page) < sandbox.MaxEventPage {
					return t.flush()
				}
				q.After = page[len(page)-1].Cursor
			}
		},
	}
	cmd.Flags().StringVar(&id, "sandbox", "", "only this sandbox's events")
	cmd.Flags().Int64Var(&after, "after", 0, "only events after this cursor")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing live events")
	cmd.Flags().IntVar(&limit, "limit", 0, "stop after this many events (0: no limit)")
	_ = cmd.RegisterFlagCompletionFunc("sandbox", a.completeIDs)
	return cmd
}

// eventDetail summarises an event's data in a few words.
func (a *app) eventDetail(ev sandbox.Event) string {
	switch ev.Type {
	case sandbox.EventCreated:
		var d sandbox.CreatedData
		if json.Unmarshal(ev.Data, &d) == nil {
			return "request " + d.ClientRequestID
		}
	case sandbox.EventStateChanged:
		var d sandbox.StateChangedData
		if json.Unmarshal(ev.Data, &d) == nil {
			s := string(d.From) + " -> " + a.state(d.To)
			if d.Reason != "" {
				s += " (" + d.Reason + ")"
			}
			return s
		}
	case sandbox.EventCommandCompleted:
		var d sandbox.CommandCompletedData
		if json.Unmarshal(ev.Data, &d) == nil {
			switch {
			case d.TimedOut:
				return fmt.Sprintf("timed out after %dms", d.DurationMs)
			case d.Cancelled:
				return fmt.Sprintf("cancelled after %dms", d.DurationMs)
			case d.ExitCode != nil:
				return fmt.Sprintf("exit %d in %dms", *d.ExitCode, d.DurationMs)
			}
		}
	case sandbox.EventFileWritten:
		var d sandbox.FileWrittenData
		if json.Unmarshal(ev.Data, &d) == nil {
			return fmt.Sprintf("%s (%d bytes)", d.Path, d.Size)
		}
	}
	return string(ev.Data)
}
