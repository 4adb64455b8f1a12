package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
)

// TestOversizedStringsAreRefused: a string past its bound (an 8 MB clientRequestId, 128 KiB of
// extensions, ...) is refused with 400 before the runtime sees it: nothing is stored, no event is
// emitted, and an event subscriber receives nothing. A string at its bound is taken.
func TestOversizedStringsAreRefused(t *testing.T) {
	srv, _, rt := originServer(t, Config{})
	ctx := context.Background()
	_, lines := streamLines(t, srv.URL+"/v1/events/stream")

	spec := func(field string, n int) string {
		return fmt.Sprintf(`{"clientRequestId":"c","%s":"%s"}`, field, strings.Repeat("x", n))
	}
	ext := func(n int) string {
		return fmt.Sprintf(`{"clientRequestId":"e","extensions":{"acme.big":"%s"}}`, strings.Repeat("x", n))
	}
	refused := map[string]string{
		"8 MB clientRequestId":         fmt.Sprintf(`{"clientRequestId":"%s"}`, strings.Repeat("k", 8<<20)),
		"clientRequestId one too many": fmt.Sprintf(`{"clientRequestId":"%s"}`, strings.Repeat("k", MaxClientRequestIDBytes+1)),
		"image":                        spec("image", MaxReferenceBytes+1),
		"template":                     spec("template", MaxReferenceBytes+1),
		"128 KiB of extensions":        ext(128 << 10),
		"extensions one too many":      ext(MaxExtensionsBytes - len(`acme.big""`) + 1),
	}
	for name, body := range refused {
		st, raw := request(t, "POST", srv.URL+"/v1/sandboxes", "", body, nil)
		if !invalidRequest(st, raw, "over the limit") {
			t.Errorf("%s: %d %.200s, want 400 invalid_request", name, st, raw)
		}
	}
	nothingRecorded(t, rt)

	// At the bound: taken.
	taken := []string{
		fmt.Sprintf(`{"clientRequestId":"%s"}`, strings.Repeat("k", MaxClientRequestIDBytes)),
		ext(MaxExtensionsBytes - len(`acme.big""`)),
	}
	for _, body := range taken {
		if st, raw := request(t, "POST", srv.URL+"/v1/sandboxes", "", body, nil); st != 201 {
			t.Fatalf("at the bound: %d %.200s, want 201", st, raw)
		}
	}
	// An image or template at the bound gets as far as the capability check (the stub provider has none).
	for _, body := range []string{spec("image", MaxReferenceBytes), spec("template", MaxReferenceBytes)} {
		if st, raw := request(t, "POST", srv.URL+"/v1/sandboxes", "", body, nil); st != 422 {
			t.Fatalf("at the bound: %d %.200s, want 422 from the stub provider", st, raw)
		}
	}
	// The subscriber's first event is the first create taken.
	var ev sandbox.Event
	if data := nextData(t, lines); json.Unmarshal([]byte(data), &ev) != nil || ev.Cursor != 1 {
		t.Fatalf("first event streamed: %.200s", data)
	}

	// A recreate's spec, a command's argv, env and cwd, a file's path: the same.
	sb, err := rt.Create(ctx, sandbox.Spec{ClientRequestID: "target"})
	if err != nil {
		t.Fatal(err)
	}
	base := srv.URL + "/v1/sandboxes/" + string(sb.ID)
	long := func(n int) string { return strings.Repeat("p", n) }
	argv := func(n int) string {
		return fmt.Sprintf(`{"expectedGeneration":1,"argv":["%s"]}`, long(n))
	}
	for name, c := range map[string]struct{ method, url, body string }{
		"recreate clientRequestId": {"POST", base + "/actions/recreate", fmt.Sprintf(`{"expectedGeneration":1,"spec":{"clientRequestId":"%s"}}`, long(MaxClientRequestIDBytes+1))},
		"recreate extensions":      {"POST", base + "/actions/recreate", fmt.Sprintf(`{"expectedGeneration":1,"spec":{"clientRequestId":"r","extensions":{"acme.x":"%s"}}}`, long(MaxExtensionsBytes))},
		"argv":                     {"POST", base + "/commands", argv(MaxArgvEnvBytes)},
		"env":                      {"POST", base + "/commands", fmt.Sprintf(`{"expectedGeneration":1,"argv":["true"],"env":{"A":"%s"}}`, long(MaxArgvEnvBytes))},
		"cwd":                      {"POST", base + "/commands", fmt.Sprintf(`{"expectedGeneration":1,"argv":["true"],"cwd":"%s"}`, long(MaxPathBytes+1))},
		"write path":               {"PUT", base + "/files/content", fmt.Sprintf(`{"expectedGeneration":1,"path":"%s","contentBase64":""}`, long(MaxPathBytes+1))},
		"read path":                {"GET", base + "/files/content?expectedGeneration=1&path=" + long(MaxPathBytes+1), ""},
		"list path":                {"GET", base + "/files/entries?expectedGeneration=1&path=" + long(MaxPathBytes+1), ""},
	} {
		st, raw := request(t, c.method, c.url, "", c.body, nil)
		if !invalidRequest(st, raw, "over the limit") {
			t.Errorf("%s: %d %.200s, want 400 invalid_request", name, st, raw)
		}
	}
	// At the bound, a command reaches the runtime (the stub provider runs none: 422).
	if st, raw := request(t, "POST", base+"/commands", "", argv(MaxArgvEnvBytes-1), nil); st != 422 {
		t.Errorf("argv at the bound: %d %.200s, want 422 from the stub provider", st, raw)
	}
	got, err := rt.Get(ctx, sb.ID)
	if err != nil || got.Generation != 1 {
		t.Fatalf("refused recreates moved the sandbox: %+v %v", got, err)
	}
}

// nextData returns the next data line of an event stream's lines.
func nextData(t *testing.T, lines <-chan string) string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the stream ended")
			}
			if data, ok := strings.CutPrefix(l, "data: "); ok {
				return data
			}
		case <-deadline:
			t.Fatal("no event streamed within 10s")
		}
	}
}
