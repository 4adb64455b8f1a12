package client_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandboxd/sandbox"
	"github.com/sandboxd/sandbox/client"
)

// Create a sandbox, wait until it is ready, run a command in it and terminate it.
func Example() {
	ctx := context.Background()
	c, err := client.New(exampleURL) // e.g. "http://127.0.0.1:4311"
	if err != nil {
		panic(err)
	}
	sb, err := c.Create(ctx, sandbox.Spec{})
	if err != nil {
		panic(err)
	}
	if sb, err = c.WaitReady(ctx, sb.ID); err != nil {
		panic(err)
	}
	res, err := c.Exec(ctx, sb.ID, sb.Generation, sandbox.Command{Argv: []string{"echo", "hello"}})
	if err != nil {
		panic(err)
	}
	fmt.Printf("exit %d: %s", *res.ExitCode, res.Stdout)
	if _, err := c.Terminate(ctx, sb.ID, sb.Generation); err != nil {
		panic(err)
	}
	sb, err = c.WaitState(ctx, sb.ID, sandbox.StateTerminated)
	fmt.Println(sb.State, err)
	// Output:
	// exit 0: hello
	// terminated <nil>
}

// Errors carry the server's error code and match the domain's error classes.
func ExampleError() {
	ctx := context.Background()
	c, _ := client.New(exampleURL)
	_, err := c.Get(ctx, "sbx_doesnotexist")
	var apiErr *client.Error
	fmt.Println(errors.Is(err, sandbox.ErrNotFound), errors.As(err, &apiErr) && apiErr.Code == sandbox.CodeNotFound)
	// Output: true true
}

// Files travel whole; a directory lists one level.
func ExampleClient_WriteFile() {
	ctx := context.Background()
	c, _ := client.New(exampleURL)
	sb, _ := c.Create(ctx, sandbox.Spec{})
	sb, _ = c.WaitReady(ctx, sb.ID)
	n, err := c.WriteFile(ctx, sb.ID, sb.Generation, "src/main.txt", []byte("hi\n"))
	fmt.Println(n, err)
	entries, _ := c.ListFiles(ctx, sb.ID, sb.Generation, "src")
	for _, e := range entries {
		fmt.Println(e.Kind, e.Path, e.Size)
	}
	data, _ := c.ReadFile(ctx, sb.ID, sb.Generation, "src/main.txt")
	fmt.Printf("%q\n", data)
	// Output:
	// 3 <nil>
	// file src/main.txt 3
	// "hi\n"
}

// Follow one sandbox's events from the start of its history.
func ExampleClient_Stream() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, _ := client.New(exampleURL)
	sb, _ := c.Create(ctx, sandbox.Spec{})
	for ev, err := range c.Stream(ctx, sandbox.EventQuery{SandboxID: sb.ID}) {
		if err != nil {
			fmt.Println(err)
			break
		}
		fmt.Println(ev.Type)
		if ev.Type == sandbox.EventStateChanged {
			break // the first state change after the create
		}
	}
	// Output:
	// sandbox.created
	// sandbox.state_changed
}
