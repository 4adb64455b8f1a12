package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandbox"
)

// BenchmarkRunTrue is the exec round trip of true through an agent on the host: the client, the unix
// socket, the agent's handler and its runner. Compare with proc's BenchmarkOSExecTrue.
func BenchmarkRunTrue(b *testing.B) {
	a := start(b)
	ctx := context.Background()
	cmd := sandbox.Command{Argv: []string{"true"}, Timeout: 10 * time.Second}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := a.c.Run(ctx, cmd, time.Second, time.Second)
		if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
			b.Fatalf("%+v %v", res, err)
		}
	}
}

// BenchmarkHealth is the bare round trip of a request to the agent.
func BenchmarkHealth(b *testing.B) {
	a := start(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := a.c.Health(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
