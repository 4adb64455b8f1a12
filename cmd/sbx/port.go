package main

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandbox"
)

// portForwardCmd: sbx port-forward ID [LOCAL:]PORT.
func (a *app) portForwardCmd() *cobra.Command {
	var address string
	cmd := &cobra.Command{
		Use:   "port-forward ID [LOCAL:]PORT",
		Short: "Forward a local TCP port to a port inside a sandbox",
		Long: "Listen on a local TCP port and forward each connection to 127.0.0.1:PORT inside the sandbox,\n" +
			"each over a WebSocket of its own, until interrupted. LOCAL 0 picks a free port; without LOCAL\n" +
			"the local port is PORT.",
		Example:           "  sbx port-forward sbx_abc 8080:80\n  sbx port-forward sbx_abc 3000",
		Args:              exactArgs(2, "a sandbox id and [LOCAL:]PORT"),
		ValidArgsFunction: a.completeIDs,
		RunE: func(_ *cobra.Command, args []string) error {
			id := sandbox.ID(args[0])
			local, remote, err := parseForward(args[1])
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", net.JoinHostPort(address, local))
			if err != nil {
				return err
			}
			defer ln.Close()
			fmt.Fprintf(a.stderr, "Forwarding %s -> %s:%d\n", ln.Addr(), id, remote)
			go func() {
				<-a.ctx.Done()
				ln.Close()
			}()
			var wg sync.WaitGroup
			defer wg.Wait()
			for {
				conn, err := ln.Accept()
				if err != nil {
					if a.ctx.Err() != nil {
						return nil
					}
					return err
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					a.forward(conn, id, remote)
				}()
			}
		},
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1", "the local address to listen on")
	return cmd
}

// parseForward reads [LOCAL:]PORT.
func parseForward(s string) (local string, remote int, err error) {
	l, r, found := strings.Cut(s, ":")
	if !found {
		r = l
	}
	if remote, err = sandbox.ParsePort(r); err != nil {
		return "", 0, usagef("%s: %v", s, err)
	}
	if l != "0" {
		if _, err := sandbox.ParsePort(l); err != nil {
			return "", 0, usagef("%s: local port: %v", s, err)
		}
	}
	return l, remote, nil
}

// forward carries one local connection to the sandbox's port and back, and closes both ends once
// either ends.
func (a *app) forward(conn net.Conn, id sandbox.ID, port int) {
	defer conn.Close()
	remote, err := a.c.DialPort(a.ctx, id, port)
	if err != nil {
		fmt.Fprintf(a.stderr, "sbx: %s: %v\n", conn.RemoteAddr(), err)
		return
	}
	defer remote.Close()
	stop := make(chan struct{})
	go func() {
		select {
		case <-a.ctx.Done():
		case <-stop:
		}
		conn.Close()
		remote.Close()
	}()
	done := make(chan struct{}, 2)
	pass := func(dst, src net.Conn) {
		_, _ = io.CopyBuffer(dst, src, make([]byte, 64<<10))
		done <- struct{}{}
	}
	go pass(remote, conn)
	go pass(conn, remote)
	<-done
	close(stop)
	<-done
}

// previewCmd: sbx preview ID PORT.
func (a *app) previewCmd() *cobra.Command {
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:               "preview ID PORT",
		Short:             "Print a preview URL of a port inside a sandbox, for a browser",
		Long:              "Make a preview token for one port of the sandbox's current generation and print its URL.\nThe daemon needs --preview-listen. Recreating the sandbox revokes it.",
		Example:           "  sbx preview sbx_abc 8080\n  sbx preview sbx_abc 8080 --ttl 10m -o json",
		Args:              exactArgs(2, "a sandbox id and a port"),
		ValidArgsFunction: a.completeIDs,
		RunE: func(_ *cobra.Command, args []string) error {
			port, err := sandbox.ParsePort(args[1])
			if err != nil {
				return usagef("%v", err)
			}
			tok, err := a.c.PreviewToken(a.ctx, sandbox.ID(args[0]), port, ttl)
			if err != nil {
				return err
			}
			if a.json() {
				return a.writeJSON(tok)
			}
			a.printf("%s\n", tok.URL)
			return nil
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "how long the URL works (default: the daemon's, an hour)")
	return cmd
}
