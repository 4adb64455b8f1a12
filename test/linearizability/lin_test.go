package linearizability

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/api"
	"github.com/sandboxd/sandbox/core"
	teststack "github.com/sandboxd/sandbox/internal/testenv/stack"
	"github.com/sandboxd/sandbox/provider/host"
)

// Bounds of one run. SANDBOXD_LIN_SEED replays a run's choices (the interleaving is the scheduler's).
const (
	sandboxes      = 3
	clients        = 8
	callsPerClient = 60
	checkTimeout   = 60 * time.Second
)

func seed(t *testing.T) uint64 {
	if v := os.Getenv("SANDBOXD_LIN_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SANDBOXD_LIN_SEED=%q: %v", v, err)
		}
		return s
	}
	return uint64(time.Now().UnixNano())
}

// stack starts the real runtime over a SQLite file and the host provider, served on 127.0.0.1.
func stack(t *testing.T) string {
	t.Helper()
	prov, err := host.New(host.Config{Dir: filepath.Join(t.TempDir(), "host")})
	if err != nil {
		t.Fatal(err)
	}
	return teststack.New(t, prov, teststack.Core(func(c *core.Config) { c.ReconcileInterval = 200 * time.Millisecond })).URL
}

type recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func (r *recorder) now() int64 { return int64(time.Since(r.start)) }

func (r *recorder) add(client int, in Input, call int64, out Output) {
	ret := r.now()
	if ret <= call {
		ret = call + 1
	}
	r.mu.Lock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	r.mu.Unlock()
}

type client struct {
	url  string
	http *http.Client
	ids  []sandbox.ID
	gens []atomic.Int64 // the newest generation any client saw, per sandbox
}

// do sends one call and reads its answer into an Output.
func (c *client) do(in Input, key string) Output {
	id := c.ids[in.Sandbox]
	base := c.url + "/v1/sandboxes/" + string(id)
	var method, url string
	var body any
	g := map[string]any{"expectedGeneration": in.Gen}
	switch in.Kind {
	case Get:
		method, url = "GET", base
	case Pause, Resume, Terminate:
		method, url, body = "POST", base+"/actions/"+string(in.Kind), g
	case Recreate:
		method, url = "POST", base+"/actions/recreate"
		body = map[string]any{"expectedGeneration": in.Gen, "spec": map[string]any{"clientRequestId": key}}
	case Exec:
		method, url = "POST", base+"/commands"
		body = map[string]any{"expectedGeneration": in.Gen, "argv": []string{"true"}}
	case Write:
		method, url = "PUT", base+"/files/content"
		body = map[string]any{"expectedGeneration": in.Gen, "path": "reg.txt",
			"contentBase64": base64.StdEncoding.EncodeToString([]byte(in.Value))}
	case Read:
		method, url = "GET", fmt.Sprintf("%s/files/content?path=reg.txt&expectedGeneration=%d", base, in.Gen)
	}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return Output{}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return Output{}
	}
	out := Output{Status: resp.StatusCode}
	if resp.StatusCode != 200 {
		var er api.ErrorResponse
		if json.Unmarshal(raw, &er) != nil {
			return Output{Status: resp.StatusCode, Code: "undecodable"}
		}
		out.Code, out.Message = er.Error.Code, er.Error.Message
		return out
	}
	switch in.Kind {
	case Read:
		var fc api.FileContent
		data, derr := []byte(nil), json.Unmarshal(raw, &fc)
		if derr == nil {
			data, derr = base64.StdEncoding.DecodeString(fc.ContentBase64)
		}
		if derr != nil {
			return Output{Status: resp.StatusCode, Code: "undecodable"}
		}
		out.Content = string(data)
	case Exec:
		var res sandbox.CommandResult
		if json.Unmarshal(raw, &res) != nil || !(res.Cancelled || res.ExitCode != nil && *res.ExitCode == 0) {
			return Output{Status: resp.StatusCode, Code: "bad_command_result", Message: string(raw)}
		}
	case Write:
	default:
		var sb sandbox.Sandbox
		if json.Unmarshal(raw, &sb) != nil {
			return Output{Status: resp.StatusCode, Code: "undecodable"}
		}
		out.Gen, out.State = sb.Generation, sb.State
		for {
			seen := c.gens[in.Sandbox].Load()
			if int64(sb.Generation) <= seen || c.gens[in.Sandbox].CompareAndSwap(seen, int64(sb.Generation)) {
				break
			}
		}
	}
	return out
}

// TestLinearizable runs the clients and checks the recorded history.
func TestLinearizable(t *testing.T) {
	s := seed(t)
	t.Logf("seed %d (replay the choices with SANDBOXD_LIN_SEED=%d)", s, s)
	url := stack(t)
	c := &client{url: url, http: &http.Client{Timeout: 30 * time.Second}, gens: make([]atomic.Int64, sandboxes)}
	for i := range sandboxes {
		var sb sandbox.Sandbox
		b, _ := json.Marshal(map[string]any{"clientRequestId": fmt.Sprintf("lin-%d", i)})
		resp, err := http.Post(url+"/v1/sandboxes", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&sb)
		resp.Body.Close()
		if resp.StatusCode != 201 || sb.State != sandbox.StateReady {
			t.Fatalf("create: %d %+v", resp.StatusCode, sb)
		}
		c.ids = append(c.ids, sb.ID)
		c.gens[i].Store(1)
	}

	rec := &recorder{start: time.Now()}
	kinds := []Kind{Get, Get, Pause, Pause, Resume, Resume, Terminate, Recreate, Recreate, Exec, Exec, Write, Write, Write, Read, Read, Read}
	var wg sync.WaitGroup
	for cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(s, uint64(cl)))
			for i := range callsPerClient {
				in := Input{Kind: kinds[rng.IntN(len(kinds))], Sandbox: rng.IntN(sandboxes)}
				gen := sandbox.Generation(c.gens[in.Sandbox].Load())
				switch r := rng.IntN(10); {
				case r == 0 && gen > 1:
					gen-- // stale
				case r == 1:
					gen++ // from the future
				}
				in.Gen = gen
				if in.Kind == Write {
					in.Value = fmt.Sprintf("c%d-%d", cl, i)
				}
				call := rec.now()
				out := c.do(in, fmt.Sprintf("lin-%d-%d", cl, i))
				rec.add(cl, in, call, out)
			}
		}()
	}
	wg.Wait()

	counts := map[string]int{}
	for _, op := range rec.ops {
		in, out := op.Input.(Input), op.Output.(Output)
		counts[fmt.Sprintf("%s %d", in.Kind, out.Status)]++
	}
	res, info := porcupine.CheckOperationsVerbose(Model(), rec.ops, checkTimeout)
	t.Logf("%d calls by %d clients on %d sandboxes: %v", len(rec.ops), clients, sandboxes, counts)
	switch res {
	case porcupine.Ok:
		t.Logf("linearizable: %d operations checked", len(rec.ops))
	case porcupine.Illegal:
		f, err := os.CreateTemp("", "sandboxd-linearizability-*.html")
		if err == nil {
			porcupine.Visualize(Model(), info, f)
			f.Close()
		}
		t.Fatalf("history of seed %d is not linearizable; visualization in %s", s, f.Name())
	default:
		t.Fatalf("history of seed %d: the checker gave up after %v", s, checkTimeout)
	}
	if counts["recreate 200"] == 0 || counts["pause 200"] == 0 || counts["write 200"] == 0 {
		t.Fatalf("the run exercised too little to mean anything: %v", counts)
	}
}
