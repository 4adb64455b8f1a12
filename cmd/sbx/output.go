package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandbox"
)

// isTerminal reports whether w is a character device, as a terminal is.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// colorOn reports whether stdout gets colour: never with NO_COLOR or -o json, always with
// --color=always, otherwise only on a terminal that is not "dumb".
func (a *app) colorOn() bool {
	if os.Getenv("NO_COLOR") != "" || a.json() {
		return false
	}
	switch a.color {
	case "always":
		return true
	case "never":
		return false
	}
	return isTerminal(a.stdout) && os.Getenv("TERM") != "dumb"
}

// paint wraps s in an ANSI colour when colour is on.
func (a *app) paint(code, s string) string {
	if !a.colorOn() {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

// state renders a state, coloured by what it means: green ready, red failed, dim when gone, yellow on
// its way somewhere.
func (a *app) state(s sandbox.State) string {
	switch {
	case s == sandbox.StateReady:
		return a.paint("32", string(s))
	case s == sandbox.StateFailed:
		return a.paint("31", string(s))
	case s == sandbox.StateTerminated:
		return a.paint("2", string(s))
	case s.Transitional() || s == sandbox.StatePaused:
		return a.paint("33", string(s))
	}
	return string(s)
}

// writeJSON prints v as indented JSON.
func (a *app) writeJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// jsonLine prints v as one line of JSON.
func (a *app) jsonLine(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table writes aligned columns; the header is upper-cased.
type table struct{ tw *tabwriter.Writer }

func (a *app) table(header ...string) *table {
	t := &table{tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(strings.ToUpper(strings.Join(header, "\t")))
	}
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }
func (t *table) flush() error        { return t.tw.Flush() }

// spinner shows that sbx is waiting, on stderr when it is a terminal, and nothing otherwise.
type spinner struct {
	stop chan struct{}
	done sync.WaitGroup
}

func (a *app) spin(msg string) *spinner {
	s := &spinner{stop: make(chan struct{})}
	if !isTerminal(a.stderr) {
		return s
	}
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		frames := `|/-\`
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			fmt.Fprintf(a.stderr, "\r%c %s", frames[i%len(frames)], msg)
			select {
			case <-s.stop:
				fmt.Fprintf(a.stderr, "\r\x1b[K")
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *spinner) Stop() {
	close(s.stop)
	s.done.Wait()
}

// progress draws a bar on stderr for transfers of at least progressMin bytes, on a terminal only.
type progress struct {
	mu          sync.Mutex // a transfer's reports come from the goroutine that sends its body
	w           io.Writer
	total, done int64
	on          bool
}

const progressMin = 1 << 20

func (a *app) progress(total int64) *progress {
	return &progress{w: a.stderr, total: total, on: total >= progressMin && isTerminal(a.stderr)}
}

func (p *progress) add(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	if !p.on {
		return
	}
	const width = 30
	frac := float64(p.done) / float64(max(p.total, 1))
	fill := int(frac * width)
	fmt.Fprintf(p.w, "\r[%s%s] %3.0f%% %s/%s", strings.Repeat("=", fill), strings.Repeat(" ", width-fill),
		frac*100, humanBytes(p.done), humanBytes(p.total))
}

// to moves the bar to done bytes, if that is on from where it is (a transfer resumed reports from
// the offset it resumed at).
func (p *progress) to(done int64) {
	p.mu.Lock()
	d := done - p.done
	p.mu.Unlock()
	if d > 0 {
		p.add(d)
	}
}

func (p *progress) finish() {
	if p.on {
		fmt.Fprintln(p.w)
	}
}

// imageBar draws a pull's or an import's progress on stderr, on a terminal only: a bar of the
// compressed bytes fetched where the daemon counts them, the layers in the store otherwise.
type imageBar struct {
	w     io.Writer
	what  string
	on    bool
	drawn bool
}

func (a *app) imageBar(what string) *imageBar {
	return &imageBar{w: a.stderr, what: what, on: isTerminal(a.stderr)}
}

func (b *imageBar) report(p sandbox.ImageProgress) {
	if !b.on {
		return
	}
	b.drawn = true
	if p.TotalBytes <= 0 {
		fmt.Fprintf(b.w, "\r%s: layer %d of %d", b.what, p.Layers, p.TotalLayers)
		return
	}
	const width = 30
	frac := min(float64(p.Bytes)/float64(p.TotalBytes), 1)
	fill := int(frac * width)
	fmt.Fprintf(b.w, "\r%s [%s%s] %3.0f%% %s/%s, layer %d of %d", b.what, strings.Repeat("=", fill), strings.Repeat(" ", width-fill),
		frac*100, humanBytes(p.Bytes), humanBytes(p.TotalBytes), p.Layers, p.TotalLayers)
}

func (b *imageBar) finish() {
	if b.drawn {
		fmt.Fprintln(b.w)
	}
}

// humanBytes renders n in binary units.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// since renders how long ago t was, to the second.
func since(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}
