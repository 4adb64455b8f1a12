// Package linearizability checks that the sandbox runtime, seen through its HTTP API, is linearizable: many
// concurrent clients issue lifecycle actions, commands, file writes and reads (with current and stale
// generations) against a few sandboxes on the real stack (httpapi over core over a SQLite store and the host
// provider), every call is recorded with its invocation and response times, and the history is checked with
// porcupine against a sequential model of the state machine, generation fencing and one file per generation.
//
// The package holds only tests. Its invariant is the property it checks: there is a sequential order of
// every recorded call, each placed between its invocation and its response, in which every response is the
// one the model gives.
package linearizability
