//go:build plainschema

package main

import (
	"github.com/sandboxd/sandbox/internal/schema"
	"github.com/sandboxd/sandbox/internal/schema/plain"
)

// plainSchemas is the library path of request validation, which --plain schema switches to
// (docs/design/request-validation.md).
var plainSchemas schema.Compiler = plain.Compile
