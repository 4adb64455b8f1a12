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
// Its log goes to daemon.log beside the data directory.
func startDaemon(ctx context.Context, bin, provider, dir string, extra ...string) (*daemon, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
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
	d.cmd = exec.Command(bin, append([]string{"serve", "--provider", provider, "--data-dir", d.dataDir, "--listen", addr}, extra...)...)
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

// stop sends SIGTERM and waits for the daemon to exit, killing it after a while.
func (d *daemon) stop() {
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
