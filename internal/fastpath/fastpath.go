// Package fastpath names the hand-made fast paths that keep a plain path beside them (docs/design),
// and reads which plain paths are switched on: `sandboxd serve --plain LIST` (SANDBOXD_PLAIN, as every
// flag of serve) for the daemon, the same variable for the Go client.
package fastpath

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// The fast paths that can be switched back to their plain path.
const (
	// JSON: request bodies (daemon) and large answers (client) parsed by jsondoc; plain: encoding/json.
	JSON = "json"
	// Schema: request validation by package schema's own compiler; plain: the JSON Schema library,
	// in a daemon built with -tags plainschema.
	Schema = "schema"
	// Tail: the newest events answered from the store's memory; plain: every read from the database
	// (and so no journal either, whose events the tail serves until they are moved).
	Tail = "tail"
	// Journal: events that change no sandbox made durable in the store's journal beside the database;
	// plain: each append a SQLite transaction.
	Journal = "journal"
)

// Names are the fast paths a list may name, besides "all".
var Names = []string{JSON, Schema, Tail, Journal}

// Env is the variable that lists the plain paths switched on.
const Env = "SANDBOXD_PLAIN"

// Plain is a set of fast paths switched to their plain path.
type Plain map[string]bool

// Parse reads a comma-separated list of Names ("all" is every one); empty is none.
func Parse(list string) (Plain, error) {
	p := Plain{}
	for _, name := range strings.Split(list, ",") {
		switch name = strings.TrimSpace(name); {
		case name == "":
		case name == "all":
			for _, n := range Names {
				p[n] = true
			}
		case slices.Contains(Names, name):
			p[name] = true
		default:
			return nil, fmt.Errorf("%q is no fast path: want a list of %s, or all", name, strings.Join(Names, ", "))
		}
	}
	return p, nil
}

// FromEnv is the set Env lists, read when called; a name it does not know is passed over.
func FromEnv() Plain {
	p := Plain{}
	for _, name := range strings.Split(os.Getenv(Env), ",") {
		if one, err := Parse(name); err == nil {
			for n := range one {
				p[n] = true
			}
		}
	}
	return p
}

// String is the list, in the order of Names.
func (p Plain) String() string {
	var out []string
	for _, n := range Names {
		if p[n] {
			out = append(out, n)
		}
	}
	return strings.Join(out, ",")
}
