package testenv

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// SSEHeartbeat opens the event stream at url with hc and fails the test unless a `: heartbeat`
// comment line comes on it within bound, before the stream ends; it closes the stream.
func SSEHeartbeat(t testing.TB, hc *http.Client, url string, bound time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET %s: %s, %s", url, resp.Status, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var lines []string
	for sc.Scan() {
		if sc.Text() == ": heartbeat" {
			return
		}
		lines = append(lines, sc.Text())
	}
	t.Fatalf("GET %s: no heartbeat comment within %v (%v), after %q", url, bound, sc.Err(), lines)
}
