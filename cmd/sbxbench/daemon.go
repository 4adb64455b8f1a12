package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// daemon is a sandboxd started by the bench on its own data directory.
type daemon struct {
	cmd     *exec.Cmd
	url     string
	dataDir string
	log     *os.File
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

// startDaemon runs `sandboxd serve` with provider on a free loopback port and waits for its health check.
// It runs without a warm pool unless extra asks for one: cold creates are the case the floors divide,
// and a pool's idle containers would count in the growth steps.
// Its log goes to daemon.log beside the data directory.
func startDaemon(ctx context.Context, bin, provider, dir string, extra ...string) (*daemon, error) {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	logf, err := os.Create(filepath.Join(dir, "daemon.log"))
	if err != nil {
		return nil, err
	}
	d := &daemon{url: "http://" + addr, dataDir: filepath.Join(dir, "data"), log: logf}
	d.cmd = exec.Command(bin, append([]string{"serve", "--provider", provider, "--data-dir", d.dataDir, "--listen", addr, "--oci-warm-pool", "0"}, extra...)...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(d.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			d.stop()
			return nil, fmt.Errorf("daemon at %s did not answer; see %s", addr, logf.Name())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop terminates every sandbox of the daemon and waits until each is terminated (a daemon stopped
// with releases still pending would leave their containers running, and the bench then deletes the
// data directory that names them), then sends SIGTERM and waits for the daemon to exit, killing it
// after a while.
func (d *daemon) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	if err := drain(ctx, newClient(d.url)); err != nil {
		fmt.Fprintf(os.Stderr, "sbxbench: some sandboxes of the daemon at %s may outlive it: %v\n", d.url, err)
	}
	cancel()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-done
	}
	d.log.Close()
}

// drain terminates every sandbox that is not terminated and waits until all are.
func drain(ctx context.Context, c *client) error {
	for {
		var l struct {
			Sandboxes []sandboxDoc `json:"sandboxes"`
		}
		if err := c.do(ctx, http.MethodGet, "/v1/sandboxes", nil, http.StatusOK, &l); err != nil {
			return err
		}
		var live []sandboxDoc
		for _, sb := range l.Sandboxes {
			switch sb.State {
			case "terminated":
			case "terminating":
				live = append(live, sb)
			default:
				live = append(live, sb)
				if err := c.terminate(ctx, sb); err != nil {
					return err
				}
			}
		}
		if len(live) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d sandboxes not terminated: %w", len(live), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
