package agentclient_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/agent/agentclient"
	"github.com/sandboxd/sandbox/agent/protocol"
	"github.com/sandboxd/sandbox/internal/agentwire"
)

// hostile is an agent that answers each request with answer, written straight to the connection, on
// net.Pipe connections: a stream that cannot be peeked, as a relayed one. It returns a client of it and
// the number of connections the client made. answer returning an error closes the connection.
func hostile(t *testing.T, wire agentclient.Wire, answer func(w io.Writer, r *http.Request) error) (*agentclient.Client, *atomic.Int32) {
	t.Helper()
	var dials atomic.Int32
	var wg sync.WaitGroup
	c := agentclient.NewWire(func(ctx context.Context) (net.Conn, error) {
		dials.Add(1)
		client, server := net.Pipe()
		// The requests are read on their own, as a relay does: a write of the client never waits for
		// the answer to be written first.
		pr, pw := io.Pipe()
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, err := io.Copy(pw, server)
			pw.CloseWithError(err)
		}()
		go func() {
			defer wg.Done()
			defer server.Close()
			defer pr.Close()
			br := bufio.NewReader(pr)
			for {
				r, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				if _, err := io.Copy(io.Discard, r.Body); err != nil {
					return
				}
				if answer(server, r) != nil {
					return
				}
			}
		}()
		return client, nil
	}, wire)
	t.Cleanup(func() { c.Close(); wg.Wait() })
	return c, &dials
}

// flood writes prefix, then n bytes made of unit over and over, then suffix, without holding n bytes.
// It writes nothing empty: on a net.Pipe, an empty write waits for a read.
func flood(w io.Writer, prefix, unit string, n int, suffix string) error {
	chunk := []byte(strings.Repeat(unit, max(1, (32<<10)/len(unit))))
	if _, err := io.WriteString(w, prefix); err != nil {
		return err
	}
	for sent := 0; sent < n; sent += len(chunk) {
		if _, err := w.Write(chunk[:min(len(chunk), n-sent)]); err != nil {
			return err
		}
	}
	if suffix == "" {
		return nil
	}
	_, err := io.WriteString(w, suffix)
	return err
}

// allocated is how many bytes of heap f allocated, in the whole process.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

var (
	healthBody = fmt.Sprintf(`{"ok":true,"protocol":%d,"version":"x","pid":7}`, protocol.Version)
	hlen       = strconv.Itoa(len(healthBody))
)

// boundCase is an answer and what the client must make of it: call returns want.
type boundCase struct {
	name   string
	answer func(w io.Writer, r *http.Request) error
	call   func(ctx context.Context, c *agentclient.Client) error
	want   error
}

// lenient names the cases whose answer net/http accepts, as RFC 9112 allows (agenthttp.Plain): on the
// plain transport, their call returns nil.
var lenient = map[string]bool{"folded header": true, "two Content-Lengths": true}

func callHealth(ctx context.Context, c *agentclient.Client) error {
	_, err := c.Health(ctx)
	return err
}

// runBounds runs each case against its own hostile agent, checking the error class and that the call
// allocated far less than the agent sent (maxAlloc).
func runBounds(t *testing.T, wire agentclient.Wire, cases []boundCase, maxAlloc uint64) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := hostile(t, wire, tc.answer)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var err error
			n := allocated(func() { err = tc.call(ctx, c) })
			want := tc.want
			if lenient[tc.name] && wire.PlainTransport {
				want = nil
			}
			if !errors.Is(err, want) {
				t.Errorf("got %v, want %v", err, want)
			}
			if n > maxAlloc {
				t.Errorf("the call allocated %d KiB, more than %d KiB", n>>10, maxAlloc>>10)
			}
			t.Logf("%v; allocated %d KiB", err, n>>10)
		})
	}
}

// TestClientBoundsTheAnswerHead: the status line and the header block are read to a bound (16 KiB, 64
// header lines), whatever the agent sends, and a malformed head is a protocol error.
func TestClientBoundsTheAnswerHead(t *testing.T) {
	eachTransport(t, func(t *testing.T, wire agentclient.Wire) {
		const huge = 64 << 20
		answer := func(head string) func(io.Writer, *http.Request) error {
			return func(w io.Writer, _ *http.Request) error {
				_, err := io.WriteString(w, head+healthBody)
				return err
			}
		}
		valid := "Content-Type: application/json\r\nContent-Length: " + hlen + "\r\n\r\n"
		cases := []boundCase{
			{"64 MiB status line", func(w io.Writer, _ *http.Request) error {
				return flood(w, "HTTP/1.1 200 ", "a", huge, "\r\n"+valid+healthBody)
			}, callHealth, sandbox.ErrProviderProtocol},
			{"64 MiB header line", func(w io.Writer, _ *http.Request) error {
				return flood(w, "HTTP/1.1 200 OK\r\nX-Big: ", "a", huge, "\r\n"+valid+healthBody)
			}, callHealth, sandbox.ErrProviderProtocol},
			{"64 MiB of header lines", func(w io.Writer, _ *http.Request) error {
				return flood(w, "HTTP/1.1 200 OK\r\n", "X-A: b\r\n", huge, valid+healthBody)
			}, callHealth, sandbox.ErrProviderProtocol},
			{"65 header lines", answer("HTTP/1.1 200 OK\r\n" + strings.Repeat("X-A: b\r\n", 63) + valid), callHealth, sandbox.ErrProviderProtocol},
			{"64 header lines", answer("HTTP/1.1 200 OK\r\n" + strings.Repeat("X-A: b\r\n", 62) + valid), callHealth, nil},
			{"status 100", answer("HTTP/1.1 100 Continue\r\n" + valid), callHealth, sandbox.ErrProviderProtocol},
			{"status 99", answer("HTTP/1.1 099 x\r\n" + valid), callHealth, sandbox.ErrProviderProtocol},
			{"HTTP/2.0", answer("HTTP/2.0 200 OK\r\n" + valid), callHealth, sandbox.ErrProviderProtocol},
			{"no status", answer("garbage\r\n" + valid), callHealth, sandbox.ErrProviderProtocol},
			{"folded header", answer("HTTP/1.1 200 OK\r\nX-A: b\r\n c\r\n" + valid), callHealth, sandbox.ErrProviderProtocol},
			{"header without a colon", answer("HTTP/1.1 200 OK\r\nX-A b\r\n" + valid), callHealth, sandbox.ErrProviderProtocol},
			{"space before the colon", answer("HTTP/1.1 200 OK\r\nContent-Length : " + hlen + "\r\n\r\n"), callHealth, sandbox.ErrProviderProtocol},
		}
		runBounds(t, wire, cases, 4<<20)
	})
}

// TestClientBoundsTheAnswerBody: every body is framed by exactly one Content-Length, which must be a
// number within what the call can legitimately get; past it the answer is refused before its body is
// read (a huge length with nothing behind it does not wait out the deadline).
func TestClientBoundsTheAnswerBody(t *testing.T) {
	eachTransport(t, func(t *testing.T, wire agentclient.Wire) {
		withLength := func(length string) func(io.Writer, *http.Request) error {
			return func(w io.Writer, _ *http.Request) error {
				_, err := io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: "+length+"\r\n\r\n"+healthBody)
				return err
			}
		}
		readFile := func(ctx context.Context, c *agentclient.Client) error { _, err := c.ReadFile(ctx, "f"); return err }
		cases := []boundCase{
			{"Content-Length 2^62", withLength(strconv.Itoa(1 << 62)), callHealth, sandbox.ErrProviderProtocol},
			{"Content-Length past int64", withLength("99999999999999999999"), callHealth, sandbox.ErrProviderProtocol},
			{"negative Content-Length", withLength("-1"), callHealth, sandbox.ErrProviderProtocol},
			{"signed Content-Length", withLength("+" + hlen), callHealth, sandbox.ErrProviderProtocol},
			{"non-numeric Content-Length", withLength(hlen + "x"), callHealth, sandbox.ErrProviderProtocol},
			{"empty Content-Length", withLength(""), callHealth, sandbox.ErrProviderProtocol},
			{"list of Content-Lengths", withLength(hlen + ", " + hlen), callHealth, sandbox.ErrProviderProtocol},
			{"two Content-Lengths", withLength(hlen + "\r\nContent-Length: " + hlen), callHealth, sandbox.ErrProviderProtocol},
			{"chunked", func(w io.Writer, _ *http.Request) error {
				_, err := fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(healthBody), healthBody)
				return err
			}, callHealth, sandbox.ErrProviderProtocol},
			{"no Content-Length", func(w io.Writer, _ *http.Request) error {
				_, err := io.WriteString(w, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"+healthBody)
				return errors.Join(err, io.EOF) // the body ends with the connection
			}, callHealth, sandbox.ErrProviderProtocol},
			{"health past 4 KiB", func(w io.Writer, _ *http.Request) error {
				return flood(w, "HTTP/1.1 200 OK\r\nContent-Length: 4097\r\n\r\n", " ", 4097, "")
			}, callHealth, sandbox.ErrProviderProtocol},
			{"file past MaxFileBytes", func(w io.Writer, _ *http.Request) error {
				return flood(w, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", sandbox.MaxFileBytes+1), "x", sandbox.MaxFileBytes+1, "")
			}, readFile, sandbox.ErrProviderProtocol},
			{"error answer past 64 KiB", func(w io.Writer, _ *http.Request) error {
				const n = 1 << 20
				return flood(w, fmt.Sprintf("HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n", n), " ", n, "")
			}, readFile, sandbox.ErrProviderProtocol},
			{"file short of its Content-Length", func(w io.Writer, _ *http.Request) error {
				_, err := io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")
				return errors.Join(err, io.EOF)
			}, readFile, sandbox.ErrProviderUnavailable},
		}
		runBounds(t, wire, cases, 4<<20)
	})
}

// compact answers an exec with the compact form: head, then the output, the length of both announced.
func compact(head string, output int) func(io.Writer, *http.Request) error {
	return func(w io.Writer, _ *http.Request) error {
		return flood(w, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s\n",
			agentwire.MediaType, len(head)+1+output, head), "o", output, "")
	}
}

func execHead(stdout, stderr int, pad int) string {
	return fmt.Sprintf(`{"exitCode":0,"stdoutBytes":%d,"stderrBytes":%d,"startedAt":"2024-01-01T00:00:00Z",%s"finishedAt":"2024-01-01T00:00:01Z"}`,
		stdout, stderr, strings.Repeat(" ", pad))
}

// TestClientBoundsTheExecAnswer: an exec answer is bounded by the request's own output cap, in the
// compact form (its head line and each stream) and in JSON (both streams in base64).
func TestClientBoundsTheExecAnswer(t *testing.T) {
	eachTransport(t, func(t *testing.T, wire agentclient.Wire) {
		exec := func(maxOutput int) func(ctx context.Context, c *agentclient.Client) error {
			return func(ctx context.Context, c *agentclient.Client) error {
				_, err := c.Exec(ctx, protocol.ExecRequest{Argv: []string{"true"}, TimeoutMs: 1000, MaxOutputBytes: maxOutput})
				return err
			}
		}
		const mib = 1 << 20
		cases := []boundCase{
			{"compact", compact(execHead(10, 6, 0), 16), exec(16), nil},
			{"compact past twice the cap", compact(execHead(16, 16, 0), 20*mib), exec(16), sandbox.ErrProviderProtocol},
			{"compact head line past 4 KiB", compact(execHead(0, 0, 100<<10), 0), exec(mib), sandbox.ErrProviderProtocol},
			{"compact stream past the cap", compact(execHead(17, 0, 0), 17), exec(16), sandbox.ErrProviderProtocol},
			{"compact huge lengths", compact(execHead(1<<62, 1<<62, 0), 16), exec(16), sandbox.ErrProviderProtocol},
			{"compact lengths that overflow", compact(execHead(1<<63-1, 2, 0), 1), exec(16), sandbox.ErrProviderProtocol},
			{"json past twice the cap in base64", func(w io.Writer, _ *http.Request) error {
				const n = 20 * mib
				return flood(w, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"stdout\":\"", len(`{"stdout":""}`)+n), "A", n, `"}`)
			}, exec(16), sandbox.ErrProviderProtocol},
		}
		runBounds(t, wire, cases, 4<<20)
	})
}

// TestClientBoundsTheListing: a listing answer has at most MaxListEntries entries.
func TestClientBoundsTheListing(t *testing.T) {
	eachTransport(t, func(t *testing.T, wire agentclient.Wire) {
		listing := func(n int) func(io.Writer, *http.Request) error {
			return func(w io.Writer, _ *http.Request) error {
				var b bytes.Buffer
				b.WriteByte('[')
				for i := range n {
					if i > 0 {
						b.WriteByte(',')
					}
					fmt.Fprintf(&b, `{"path":"f%d","kind":"file","size":1}`, i)
				}
				b.WriteByte(']')
				_, err := fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", b.Len(), b.Bytes())
				return err
			}
		}
		list := func(want int) func(ctx context.Context, c *agentclient.Client) error {
			return func(ctx context.Context, c *agentclient.Client) error {
				entries, err := c.List(ctx, ".")
				if err == nil && len(entries) != want {
					return fmt.Errorf("%d entries, want %d", len(entries), want)
				}
				return err
			}
		}
		cases := []boundCase{
			{"at the limit", listing(protocol.MaxListEntries), list(protocol.MaxListEntries), nil},
			{"past the limit", listing(protocol.MaxListEntries + 1), list(0), sandbox.ErrProviderProtocol},
			{"past MaxListBytes", func(w io.Writer, _ *http.Request) error {
				return flood(w, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", protocol.MaxListBytes+1), " ", protocol.MaxListBytes+1, "")
			}, list(0), sandbox.ErrProviderProtocol},
		}
		runBounds(t, wire, cases, 8<<20)
	})
}

// TestClientDropsTheConnectionOfARefusedAnswer: an answer refused as a protocol error leaves its
// connection closed, even when its body was read to its end; an accepted one leaves it for the next call.
func TestClientDropsTheConnectionOfARefusedAnswer(t *testing.T) {
	eachTransport(t, func(t *testing.T, wire agentclient.Wire) {
		var calls atomic.Int32
		good := compact(execHead(1, 0, 0), 1)
		bad := compact(strings.Replace(execHead(1, 0, 0), `"exitCode":0`, `"exitCode":300`, 1), 1) // framed right
		c, dials := hostile(t, wire, func(w io.Writer, r *http.Request) error {
			if calls.Add(1) == 2 {
				return bad(w, r)
			}
			return good(w, r)
		})
		req := protocol.ExecRequest{Argv: []string{"true"}, TimeoutMs: 1000, MaxOutputBytes: 1 << 20}
		for i, want := range []error{nil, sandbox.ErrProviderProtocol, nil} {
			if _, err := c.Exec(bounded(t), req); !errors.Is(err, want) {
				t.Fatalf("call %d: got %v, want %v", i+1, err, want)
			}
		}
		if n := dials.Load(); n != 2 {
			t.Fatalf("%d connections for an accepted, a refused and an accepted answer, want 2", n)
		}
	})
}

// TestClientCutsATrickle: an agent that sends its answer a byte at a time, forever, is cut by the
// call's deadline, in the head or in the body.
func TestClientCutsATrickle(t *testing.T) {
	eachTransport(t, func(t *testing.T, wire agentclient.Wire) {
		trickle := func(prefix string) func(io.Writer, *http.Request) error {
			return func(w io.Writer, _ *http.Request) error {
				if _, err := io.WriteString(w, prefix); err != nil {
					return err
				}
				for {
					if _, err := w.Write([]byte{'a'}); err != nil {
						return err
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
		}
		for _, tc := range []struct{ name, prefix string }{
			{"head", "HTTP/1.1 200 OK\r\nX-Slow: "},
			{"body", "HTTP/1.1 200 OK\r\nContent-Length: 4000\r\n\r\n"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c, _ := hostile(t, wire, trickle(tc.prefix))
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				done := make(chan error, 1)
				go func() { done <- callHealth(ctx, c) }()
				select {
				case err := <-done:
					if !errors.Is(err, sandbox.ErrProviderUnavailable) {
						t.Fatalf("got %v, want %v", err, sandbox.ErrProviderUnavailable)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the call outlived its deadline")
				}
			})
		}
	})
}

// TestClientRefusesAnotherProtocol: an agent that speaks another protocol version is refused at its
// health answer with an error naming both versions and its build; one that names none speaks 1 (the
// agent of a sandbox an older daemon started), and is refused too.
func TestClientRefusesAnotherProtocol(t *testing.T) {
	eachTransport(t, func(t *testing.T, wire agentclient.Wire) {
		answer := func(body string) func(w io.Writer, r *http.Request) error {
			return func(w io.Writer, r *http.Request) error {
				_, err := fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
				return err
			}
		}
		c, _ := hostile(t, wire, answer(healthBody))
		if _, err := c.Health(bounded(t)); err != nil {
			t.Errorf("%s: %v", healthBody, err)
		}
		// An answer that names no protocol is of protocol 1, older than this one.
		for _, body := range []string{`{"ok":true,"version":"9.9","pid":7}`, fmt.Sprintf(`{"ok":true,"protocol":%d,"version":"9.9","pid":7}`, protocol.Version+1)} {
			c, _ := hostile(t, wire, answer(body))
			_, err := c.Health(bounded(t))
			if !errors.Is(err, protocol.ErrMismatch) || !errors.Is(err, sandbox.ErrProviderProtocol) ||
				!strings.Contains(err.Error(), fmt.Sprintf("this daemon %d", protocol.Version)) || !strings.Contains(err.Error(), `"9.9"`) {
				t.Errorf("an agent of another protocol (%s): %v", body, err)
			}
		}
	})
}
